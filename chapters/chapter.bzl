"""Every chapter is the same pair of programs: :server (the chapter's idea)
and :client (common/client.cc, the same in every chapter)."""

# Every chapter, in the ladder's order.
CHAPTERS = [
    "09_multinet",
    "10_warmup",
    "11_multithread",
    "12_pin",
    "13_shard",
    "14_batch",
    "15_lazy",
    "16_thread_domain",
    "17_op_pool",
    "18_more",
]

def chapter_binaries():
    """Every chapter's :client and :server: the data of a test that runs them all."""
    return ["//chapters/%s:%s" % (c, p) for c in CHAPTERS for p in ["client", "server"]]

def chapter(name):
    native.cc_binary(
        name = "server",
        srcs = ["server.cc"],
        # --provider simnic finds the simulated NIC in the runfiles.
        data = ["//simnic:libsimnic-fi.so"],
        visibility = ["//visibility:public"],
        deps = ["//common:server"],
    )
    # The same server counting its atomic operations (harness/atomic_census.cc):
    # server.cc compiled with the sanitizer's hooks, which the census library
    # provides. Its runs count, they do not time. Built when asked for (under
    # a sanitizer, the plain server: //harness:sanitized).
    native.cc_binary(
        name = "server_atomic_census",
        srcs = ["server.cc"],
        copts = select({
            "//harness:sanitized": [],
            "//conditions:default": ["-fsanitize=thread"],
        }),
        data = ["//simnic:libsimnic-fi.so"],
        tags = ["manual"],
        visibility = ["//visibility:public"],
        deps = ["//common:server"] + select({
            "//harness:sanitized": [],
            "//conditions:default": ["//harness:atomic_census"],
        }),
    )
    native.cc_binary(
        name = "client",
        srcs = ["client.cc"],
        data = ["//simnic:libsimnic-fi.so"],
        visibility = ["//visibility:public"],
        deps = ["//common:client"],
    )
