"""rules_java from Debian's bazel-rules-java, or a self-contained stand-in.

Bazel 3.5 and 4.2 load @rules_java even for a pure C++ build: their
@bazel_tools//tools/jdk package loads java_toolchain, java_import and the
other Java rules from @rules_java//java:defs.bzl. Debian installs rules_java
at /usr/share/bazel/rules/java. Ubuntu's bazel-bootstrap (3.5.1 on 22.04,
4.2.3 on 24.04) comes without it, and a Bazel from Bazelisk has no such
folder: there the stand-in below defines each of those rules as the native
rule of the same name, which is what rules_java 4 does, and no more. A C++
build never runs them.

TUTORIAL_RULES_JAVA_STANDIN=1 takes the stand-in even where Debian's is
installed (to try it on a Debian machine).
"""

_DEBIAN_PATH = "/usr/share/bazel/rules/java"

_RULES = [
    "java_binary",
    "java_import",
    "java_library",
    "java_lite_proto_library",
    "java_package_configuration",
    "java_plugin",
    "java_proto_library",
    "java_runtime",
    "java_test",
    "java_toolchain",
]

def _defs_bzl():
    lines = ['"""Java rules as Bazel\'s native ones (stand-in for rules_java)."""', ""]
    lines.append('version = "stand-in"')
    for rule in _RULES:
        lines += ["", "def %s(**attrs):" % rule, "    native.%s(**attrs)" % rule]
    return "\n".join(lines) + "\n"

_CONSTRAINTS = """package(default_visibility = ["//visibility:public"])

constraint_setting(name = "runtime")

[constraint_value(name = "jdk%d" % v, constraint_setting = ":runtime") for v in [8, 9, 10, 11]]
"""

_REPOSITORIES = """def rules_java_dependencies():
    pass

def rules_java_toolchains():
    pass
"""

def _debian_rules_java_impl(ctx):
    debian = ctx.path(_DEBIAN_PATH)
    if debian.exists and not ctx.os.environ.get("TUTORIAL_RULES_JAVA_STANDIN", ""):
        for child in debian.readdir():
            ctx.symlink(child, child.basename)
        return
    ctx.file("WORKSPACE", "workspace(name = \"rules_java\")\n")
    ctx.file("BUILD.bazel", "")
    ctx.file("java/BUILD.bazel", "exports_files([\"defs.bzl\", \"repositories.bzl\"])\n")
    ctx.file("java/defs.bzl", _defs_bzl())
    ctx.file("java/repositories.bzl", _REPOSITORIES)
    ctx.file("java/constraints/BUILD.bazel", _CONSTRAINTS)

debian_rules_java = repository_rule(
    implementation = _debian_rules_java_impl,
    environ = ["TUTORIAL_RULES_JAVA_STANDIN"],
    local = True,
)
