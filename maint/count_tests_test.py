#!/usr/bin/env python3
"""count_tests.py: what CI's "N passed, N failed" line is counted from."""
import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import count_tests  # noqa: E402

CASES = """<?xml version="1.0"?>
<testsuites><testsuite name="s">
  <testcase name="a"/>
  <testcase name="b"><failure message="x"/></testcase>
  <testcase name="c" status="notrun"/>
</testsuite></testsuites>
"""
NO_CASES_FAILED = '<testsuites><testsuite><error message="crash"/></testsuite></testsuites>'


class CountTestsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.logs = pathlib.Path(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def write(self, rel, text):
        path = self.logs / rel / "test.xml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def test_counts_cases_and_skips_not_run(self):
        self.write("tests/unit_test", CASES)
        self.assertEqual(count_tests.count(self.logs), (1, 1))

    def test_target_without_cases_counts_once(self):
        self.write("tests/crash_test", NO_CASES_FAILED)
        self.write("tests/broken_test", "not xml")
        self.assertEqual(count_tests.count(self.logs), (0, 2))

    def test_logs_of_removed_targets_are_left_out(self):
        self.write("tests/unit_test", CASES)
        self.write("tests/removed_test", NO_CASES_FAILED)
        self.write("tests/sharded_test/shard_1_of_2", CASES)
        targets = ["//tests:unit_test", "//tests:sharded_test", ""]
        self.assertEqual(count_tests.count(self.logs, targets), (2, 2))

    def test_a_target_name_is_not_a_prefix_match(self):
        self.write("tests/unit_test_old", NO_CASES_FAILED)
        self.assertEqual(count_tests.count(self.logs, ["//tests:unit_test"]), (0, 0))


if __name__ == "__main__":
    unittest.main()
