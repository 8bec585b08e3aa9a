"""Every chapter is the same pair of programs: :server (the chapter's idea)
and :client (common/client.cc, the same in every chapter)."""

def chapter(name):
    native.cc_binary(
        name = "server",
        srcs = ["server.cc"],
        # --provider simnic finds the simulated NIC in the runfiles.
        data = ["//simnic:libsimnic-fi.so"],
        visibility = ["//visibility:public"],
        deps = ["//common:server"],
    )
    native.cc_binary(
        name = "client",
        srcs = ["client.cc"],
        data = ["//simnic:libsimnic-fi.so"],
        visibility = ["//visibility:public"],
        deps = ["//common:client"],
    )
