"""Finds the system libraries the tutorial builds against.

Each dependency is a repository rule so that a user can point the build at
another installation without editing a BUILD file:

  LIBFABRIC_PREFIX  a libfabric install prefix (default: /opt/amazon/efa when
                    the AWS EFA installer put one there, else the system's)
  HWLOC_PREFIX      an hwloc install prefix (default: the system's)
  GTEST_PREFIX      a GoogleTest install prefix (default: the system's)
  CUDA_HOME         a CUDA toolkit (default: /usr/local/cuda); without one the
                    build still succeeds and the programs use host memory
"""

def _lib_dir(ctx, prefix, names):
    """Returns the first of prefix/{lib64,lib,...} that holds one of `names`."""
    for sub in ["lib64", "lib", "lib/x86_64-linux-gnu", "targets/x86_64-linux/lib"]:
        for name in names:
            if ctx.path("%s/%s/%s" % (prefix, sub, name)).exists:
                return "%s/%s" % (prefix, sub)
    return None

def _prefixed_library(ctx, what, prefix, header, lib_names, link_flag, extra_linkopts = []):
    """Writes BUILD for a library installed under `prefix`."""
    if not ctx.path("%s/include/%s" % (prefix, header)).exists:
        fail("%s: %s/include/%s not found" % (what, prefix, header))
    libdir = _lib_dir(ctx, prefix, lib_names)
    if libdir == None:
        fail("%s: none of %s found under %s/lib*" % (what, lib_names, prefix))
    ctx.symlink(prefix + "/include", "include")
    ctx.file("BUILD.bazel", """
cc_library(
    name = "{name}",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
    linkopts = ["-L{libdir}", "-Wl,-rpath,{libdir}", "{flag}"] + {extra},
    visibility = ["//visibility:public"],
)
""".format(name = ctx.name, libdir = libdir, flag = link_flag, extra = extra_linkopts))
    ctx.file("prefix.txt", prefix + "\n")

def _system_library(ctx, what, header, link_flags, hint):
    """Writes BUILD for a library in the compiler's default search paths."""
    found = False
    for inc in ["/usr/include", "/usr/local/include"]:
        if ctx.path("%s/%s" % (inc, header)).exists:
            found = True
    if not found:
        fail("%s: <%s> not found; %s" % (what, header, hint))
    ctx.file("BUILD.bazel", """
cc_library(
    name = "{name}",
    linkopts = {flags},
    visibility = ["//visibility:public"],
)
""".format(name = ctx.name, flags = link_flags))
    ctx.file("prefix.txt", "system\n")

def _libfabric_impl(ctx):
    prefix = ctx.os.environ.get("LIBFABRIC_PREFIX", "")
    if not prefix and ctx.path("/opt/amazon/efa/include/rdma/fabric.h").exists:
        prefix = "/opt/amazon/efa"
    if prefix:
        _prefixed_library(ctx, "libfabric", prefix, "rdma/fabric.h", ["libfabric.so"], "-lfabric")
    else:
        _system_library(ctx, "libfabric", "rdma/fabric.h", ["-lfabric"],
                        "run tools/setup.sh (Debian's libfabric-dev) or set LIBFABRIC_PREFIX")

def _hwloc_impl(ctx):
    prefix = ctx.os.environ.get("HWLOC_PREFIX", "")
    if prefix:
        _prefixed_library(ctx, "hwloc", prefix, "hwloc.h", ["libhwloc.so"], "-lhwloc")
    else:
        _system_library(ctx, "hwloc", "hwloc.h", ["-lhwloc"],
                        "run tools/setup.sh (Debian's libhwloc-dev) or set HWLOC_PREFIX")

def _gtest_impl(ctx):
    prefix = ctx.os.environ.get("GTEST_PREFIX", "")
    if prefix:
        libdir = _lib_dir(ctx, prefix, ["libgtest.a", "libgtest.so"])
        if libdir == None or not ctx.path(prefix + "/include/gtest/gtest.h").exists:
            fail("GTEST_PREFIX=%s holds no GoogleTest" % prefix)
        ctx.symlink(prefix + "/include", "include")
        hdrs = 'glob(["include/gtest/**/*.h"])'
        includes = '["include"]'
        linkopts = '["-L%s", "-Wl,-rpath,%s"]' % (libdir, libdir)
    else:
        if not ctx.path("/usr/include/gtest/gtest.h").exists:
            fail("GoogleTest: <gtest/gtest.h> not found; run tools/setup.sh (Debian's libgtest-dev) or set GTEST_PREFIX")
        hdrs = "[]"
        includes = "[]"
        linkopts = "[]"
    ctx.file("BUILD.bazel", """
cc_library(
    name = "gtest",
    hdrs = {hdrs},
    includes = {includes},
    linkopts = {linkopts} + ["-lgtest", "-pthread"],
    visibility = ["//visibility:public"],
)

cc_library(
    name = "gtest_main",
    linkopts = {linkopts} + ["-lgtest_main"],
    deps = [":gtest"],
    visibility = ["//visibility:public"],
)
""".format(hdrs = hdrs, includes = includes, linkopts = linkopts))

def _cuda_impl(ctx):
    home = ctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
    has_headers = ctx.path(home + "/include/cuda_runtime.h").exists
    static_dir = _lib_dir(ctx, home, ["libcudart_static.a"]) if has_headers else None
    shared_dir = _lib_dir(ctx, home, ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]) if has_headers else None
    if not has_headers or (static_dir == None and shared_dir == None):
        if ctx.os.environ.get("CUDA_HOME", ""):
            fail("CUDA_HOME=%s has no include/cuda_runtime.h and libcudart" % home)

        # No toolkit: an empty library, the programs use host memory only.
        ctx.file("BUILD.bazel", """
cc_library(name = "cuda", visibility = ["//visibility:public"])
""")
        ctx.file("prefix.txt", "none\n")
        return
    ctx.symlink(home + "/include", "include")
    if static_dir != None:
        # Static cudart makes the binaries self-contained: the GPU machine
        # needs only its driver (libcuda), found at run time.
        linkopts = ["%s/libcudart_static.a" % static_dir, "-ldl", "-lrt", "-pthread"]
    else:
        lib = "libcudart.so"
        for candidate in ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]:
            if ctx.path("%s/%s" % (shared_dir, candidate)).exists:
                lib = candidate
                break
        linkopts = ["%s/%s" % (shared_dir, lib), "-Wl,-rpath,%s" % shared_dir, "-ldl"]
    ctx.file("BUILD.bazel", """
cc_library(
    name = "cuda",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    defines = ["TUTORIAL_HAVE_CUDA=1"],
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
""".format(linkopts = linkopts))
    ctx.file("prefix.txt", home + "\n")

libfabric_repository = repository_rule(implementation = _libfabric_impl, environ = ["LIBFABRIC_PREFIX"], local = True)
hwloc_repository = repository_rule(implementation = _hwloc_impl, environ = ["HWLOC_PREFIX"], local = True)
gtest_repository = repository_rule(implementation = _gtest_impl, environ = ["GTEST_PREFIX"], local = True)
cuda_repository = repository_rule(implementation = _cuda_impl, environ = ["CUDA_HOME"], local = True)

def tutorial_dependencies():
    libfabric_repository(name = "libfabric")
    hwloc_repository(name = "hwloc")
    gtest_repository(name = "googletest")
    cuda_repository(name = "cuda")
