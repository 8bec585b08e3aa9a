"""Runs the exercises' checks that need no build (CI runs each once).

maint/run_exercises.py --bin-dir runs every exercise whose check needs no
rebuild and no Bazel inside: with Bazel's binaries it runs the check and
compares its verdict (the page's <!-- verdict: ... --> patterns) with
nothing but itself; a check that prints no verdict fails. The checks that
edit the code (sed -i, then a rebuild) or run `bazel run`/`bazel test`
cannot run inside a Bazel test; `python3 maint/run_exercises.py` runs them
from a checkout, and results/exercises-2core/ holds their 5-times run.
Unit tests of how a verdict is read and how a check loses its build come
first.
"""
import os
import pathlib
import subprocess
import sys
import unittest

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]


def source_root():
    """The checkout: Bazel's runfiles link docs/README.md to it."""
    return (RUNFILES / "docs" / "README.md").resolve().parent.parent


sys.path.insert(0, str(source_root() / "maint"))
import run_exercises  # noqa: E402


class VerdictTest(unittest.TestCase):
    def test_a_verdict_is_every_match_in_order(self):
        out = ("  longest_write_run          2\nthat was kBatchSize = 1\n"
               "  longest_write_run          8\nthat was kBatchSize = 16\n")
        self.assertEqual(run_exercises.verdict_of(
            [r"longest_write_run\s+(\d+)", r"^that was (kBatchSize = \d+)"], out),
            ["2", "kBatchSize = 1", "8", "kBatchSize = 16"])

    def test_a_check_without_its_build(self):
        check, why = run_exercises.for_bin_dir(
            ["bazel build //chapters/10_warmup/...",
             "python3 tools/run_chapter.py 10_warmup --provider shm --no-build &"],
            pathlib.Path("/bins"))
        self.assertIsNone(why)
        self.assertEqual(check, ["python3 tools/run_chapter.py 10_warmup --bin-dir /bins "
                                 "--provider shm &"])

    def test_checks_that_edit_the_code_are_skipped(self):
        check, why = run_exercises.for_bin_dir(
            ["sed -i 's/a/b/' chapters/14_batch/server.cc",
             "python3 tools/run_chapter.py 14_batch"], pathlib.Path("/bins"))
        self.assertIsNone(check)
        self.assertIn("rebuild", why)
        self.assertEqual(run_exercises.edited_files(
            ["sed -i -e 's/a/b/' -e 's/c/d/' chapters/10_warmup/server.cc"]),
            ["chapters/10_warmup/server.cc"])


class FlaggedTest(unittest.TestCase):
    def test_flagged_runs_are_counted_and_keep_their_verdict(self):
        out = ("  run flagged (preempted, engine behind): it does not count\n"
               "12_pin: 80008 WRITE(s), 0.1553 Mops/s\n  doorbells   1.000 per WRITE\n"
               "  run flagged (preempted): it does not count\n")
        self.assertEqual(run_exercises.flagged_runs(out), 2)
        self.assertEqual(run_exercises.verdict_of([r"^(\S+): (\d+) WRITE\(s\)"], out),
                         ["12_pin 80008"])
        self.assertEqual(run_exercises.flagged_runs("Transfer done\n"), 0)


class RunTheChecksTest(unittest.TestCase):
    def test_every_check_without_a_build_gives_a_verdict(self):
        env = dict(os.environ, FI_PROVIDER_PATH=str(RUNFILES / "simnic"))
        run = subprocess.run([sys.executable, str(source_root() / "maint" / "run_exercises.py"),
                              "--bin-dir", str(RUNFILES / "chapters"), "--timeout", "240"],
                             cwd=source_root(), capture_output=True, text=True, timeout=1500,
                             env=env)
        print(run.stdout[-6000:])  # the verdicts, in the test's log
        self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr[-2000:])
        self.assertRegex(run.stdout, r"11\.2\s+1/1 same")


if __name__ == "__main__":
    unittest.main()
