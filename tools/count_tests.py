#!/usr/bin/env python3
"""Counts test cases in Bazel's test logs (JUnit XML written by GoogleTest).

Prints "N passed, N failed" for the test.xml files under the given folder.
A test target that failed without writing any test case (a crash, a
timeout, a build failure) counts as one failed case, so nothing is hidden.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def count(folder: pathlib.Path):
    passed = failed = 0
    for xml in sorted(folder.rglob("test.xml")):
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
    if len(sys.argv) != 2:
        print("usage: count_tests.py BAZEL_TESTLOGS_DIR", file=sys.stderr)
        return 2
    passed, failed = count(pathlib.Path(sys.argv[1]))
    print(f"{passed} {failed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
