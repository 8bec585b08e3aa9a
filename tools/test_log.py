#!/usr/bin/env python3
"""Prints what a Bazel test wrote into its log: its summary, after the run.

`bazel test` shows only PASSED for a test that passed; the test's own
output is in bazel-testlogs/<package>/<name>/test.log. This prints it, or
with --summary only the lines a test marks as its summary (for
two_hosts_netns_test, the "two hosts:" lines).

  bazel test //tests:two_hosts_netns_test
  python3 tools/test_log.py two_hosts_netns_test
  python3 tools/test_log.py //tests:two_hosts_netns_test --all
"""
import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The prefix of each test's summary lines.
SUMMARIES = {"two_hosts_netns_test": "two hosts: "}


def log_path(target):
    label = target[2:] if target.startswith("//") else f"tests:{target}"
    package, _, name = label.partition(":")
    return ROOT / "bazel-testlogs" / package / name / "test.log", name


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("test", help="a test name in tests/ (two_hosts_netns_test) or a label")
    parser.add_argument("--all", action="store_true", help="the whole log, not the summary")
    args = parser.parse_args()
    path, name = log_path(args.test)
    if not path.exists():
        print(f"test_log: {path} not found: run `bazel test //tests:{name}` first",
              file=sys.stderr)
        return 1
    text = path.read_text(errors="replace")
    prefix = SUMMARIES.get(name)
    if args.all or not prefix:
        print(text, end="")
        return 0
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    skipped = [line for line in text.splitlines() if "SKIPPED" in line]
    print("\n".join(lines or skipped or [f"test_log: no '{prefix}' lines in {path} "
                                        "(did the test fail? --all shows everything)"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
