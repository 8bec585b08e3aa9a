"""One end-to-end test target per chapter, from a single source."""

def chapter_e2e_test(chapter, size = "medium", tags = []):
    native.cc_test(
        name = chapter + "_e2e_test",
        srcs = ["chapter_e2e_test.cc"],
        copts = ['-DTUTORIAL_CHAPTER=\\"%s\\"' % chapter],
        data = [
            "//chapters/%s:server" % chapter,
            "//chapters/%s:client" % chapter,
            "//simnic:libsimnic-fi.so",
        ],
        size = size,
        tags = tags,
        deps = [
            ":process",
            "@googletest//:gtest_main",
        ],
    )
