"""rules_java from Debian's bazel-rules-java, or an empty stand-in.

Bazel 4.2 loads @rules_java even for C++ builds. Debian installs it at
/usr/share/bazel/rules/java; where it is missing (a newer Bazel on another
distribution brings its own), an empty repository is enough for C++.
"""

_DEBIAN_PATH = "/usr/share/bazel/rules/java"

def _debian_rules_java_impl(ctx):
    debian = ctx.path(_DEBIAN_PATH)
    if debian.exists:
        for child in debian.readdir():
            ctx.symlink(child, child.basename)
    else:
        ctx.file("WORKSPACE", "workspace(name = \"rules_java\")\n")
        ctx.file("BUILD.bazel", "")
        ctx.file("java/BUILD.bazel", "")
        ctx.file("java/defs.bzl", "")
        ctx.file("java/repositories.bzl", "def rules_java_dependencies():\n    pass\n\ndef rules_java_toolchains():\n    pass\n")

debian_rules_java = repository_rule(
    implementation = _debian_rules_java_impl,
    local = True,
)
