"""Checks the chapter pages' exercises and design notes.

Runs maint/check_exercises.py on the source tree with the chapters' binaries
that Bazel built (their --help lists the flags a check may give), and makes
sure that the check catches an exercise whose edit no longer finds its text,
a flag the binary lacks, a missing target, an exercise without a check and
a page without a design note.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
PAGE = "14_batch.md"  # the page the broken copies are made from


def source_root():
    """The checkout: Bazel's runfiles link docs/README.md to it."""
    return (RUNFILES / "docs" / "README.md").resolve().parent.parent


def check(root):
    tool = source_root() / "maint" / "check_exercises.py"
    return subprocess.run([sys.executable, str(tool), "--root", str(root), "--bin-dir",
                           str(RUNFILES / "chapters")],
                          capture_output=True, text=True, timeout=600)


def broken_copy(tmp, old, new):
    """The parts of the checkout the checks read, with PAGE's old text made new."""
    copy = pathlib.Path(tmp)
    for part in ("chapters", "common", "docs", "maint", "simnic", "tools"):
        shutil.copytree(source_root() / part, copy / part,
                        ignore=shutil.ignore_patterns("*.png", "*.svg", "output"))
    page = copy / "docs" / PAGE
    text = page.read_text()
    assert old in text, f"{PAGE} no longer has {old!r}: update this test"
    page.write_text(text.replace(old, new, 1))
    return copy


class ExercisesCheckTest(unittest.TestCase):
    def test_every_page_has_checked_exercises_and_a_design_note(self):
        result = check(source_root())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("0 problem(s)", result.stdout)

    def assert_caught(self, old, new, expected):
        with tempfile.TemporaryDirectory() as tmp:
            result = check(broken_copy(tmp, old, new))
            self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
            self.assertIn(f"docs/{PAGE}", result.stdout)
            self.assertIn(expected, result.stdout)

    def test_catches_an_edit_whose_text_is_gone(self):
        self.assert_caught("s/kBatchSize = 16;/", "s/kBatchSize = 17;/", "changes nothing")

    def test_catches_a_flag_the_tool_lacks(self):
        self.assert_caught("--repeat 20 --counters", "--repeat 20 --countres", "no flag --countres")

    def test_catches_a_missing_file(self):
        self.assert_caught("git checkout -- chapters/14_batch/server.cc",
                           "git checkout -- chapters/14_batch/sever.cc", "no file")

    def test_catches_an_unknown_simnic_variable(self):
        self.assert_caught("SIMNIC_CQ_POLL_NS=0 python3", "SIMNIC_CQ_POLL=0 python3",
                           "simnic reads no variable SIMNIC_CQ_POLL")

    def test_catches_an_exercise_without_a_check(self):
        self.assert_caught("Check:", "See:", "no 'Check:' line")

    def test_catches_a_path_another_checkout_may_use(self):
        shared = "/" + "tmp/ex14.out"  # split: //docs:checkout_paths_test looks for such paths
        self.assert_caught("--repeat 20 --counters", f"--repeat 20 --counters > {shared}",
                           f"names {shared}, a path another checkout may use too")

    def test_catches_a_page_without_a_design_note(self):
        self.assert_caught("## Design note", "## Notes", "no '## Design note' section")

    def test_catches_a_chapter_flag_the_binary_lacks_and_a_missing_target(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = broken_copy(tmp, "Check:\n\n```sh\n", "Check:\n\n```sh\n"
                               "bazel run //chapters/14_batch:server -- --provider shm --batch 4\n"
                               "bazel build //chapters/14_batch:sever\n")
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("//chapters/14_batch:server has no flag --batch", result.stdout)
            self.assertIn("no Bazel target //chapters/14_batch:sever", result.stdout)


if __name__ == "__main__":
    unittest.main()
