#!/usr/bin/env python3
"""Counts test cases in Bazel's test logs (JUnit XML written by GoogleTest).

Prints "N passed, N failed" for the test.xml files under the given folder.
A test target that failed without writing any test case (a crash, a
timeout, a build failure) counts as one failed case, so nothing is hidden.
Given the test targets that exist now (one label per line, as from
`bazel query 'tests(//...)'`), it leaves out the logs that a removed or
renamed target left behind in a checkout that is not fresh.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def log_dir(label: str) -> pathlib.PurePosixPath:
    """//tests:foo_test -> tests/foo_test, where Bazel writes the target's logs."""
    package, _, name = label.strip().lstrip("@").lstrip("/").partition(":")
    return pathlib.PurePosixPath(package) / name


def count(folder: pathlib.Path, targets=None):
    passed = failed = 0
    wanted = None if targets is None else {log_dir(t) for t in targets if t.strip()}
    for xml in sorted(folder.rglob("test.xml")):
        if wanted is not None:
            rel = pathlib.PurePosixPath(xml.relative_to(folder).as_posix())
            # A sharded target writes shard_K_of_N/test.xml below its folder.
            if wanted.isdisjoint(rel.parents):
                continue
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError:
            failed += 1
            continue
        cases = list(root.iter("testcase"))
        if not cases:
            bad = root.find(".//failure") is not None or root.find(".//error") is not None
            failed += 1 if bad else 0
            passed += 0 if bad else 1
            continue
        for case in cases:
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.get("result") == "suppressed" or case.get("status") == "notrun":
                continue
            else:
                passed += 1
    return passed, failed


def main():
    if len(sys.argv) not in (2, 3):
        print("usage: count_tests.py BAZEL_TESTLOGS_DIR [TEST_LABELS_FILE]", file=sys.stderr)
        return 2
    targets = None
    if len(sys.argv) == 3:
        targets = pathlib.Path(sys.argv[2]).read_text().splitlines()
    passed, failed = count(pathlib.Path(sys.argv[1]), targets)
    print(f"{passed} {failed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
