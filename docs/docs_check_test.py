"""Checks that the docs pages' generated blocks match the code and results.

Runs tools/docs_diff.py --check on the source tree, and makes sure that the
check does catch a page whose diff no longer matches a chapter's code.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest


def source_root():
    """The checkout: Bazel's runfiles link docs/README.md to it."""
    runfiles = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
    return (runfiles / "docs" / "README.md").resolve().parent.parent


def check(root):
    tool = source_root() / "tools" / "docs_diff.py"
    return subprocess.run([sys.executable, str(tool), "--check", "--root", str(root)],
                          capture_output=True, text=True)


class DocsCheckTest(unittest.TestCase):
    def test_pages_match_code_and_results(self):
        result = check(source_root())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_check_catches_a_stale_diff(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp)
            for part in ("chapters", "docs", "results"):
                shutil.copytree(source_root() / part, copy / part,
                                ignore=shutil.ignore_patterns("*.png"))
            server = copy / "chapters" / "12_pin" / "server.cc"
            text = server.read_text()
            self.assertIn("PinThisThread(preferred_cpu);", text)
            server.write_text(text.replace("PinThisThread(preferred_cpu);",
                                           "PinThisThread(preferred_cpu);  // changed", 1))
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            # The chapter's own page and the next one's both show that file.
            self.assertIn("docs/12_pin.md", result.stdout)
            self.assertIn("docs/13_shard.md", result.stdout)
            self.assertNotIn("docs/11_multithread.md", result.stdout.split("stale page(s):")[-1])

    def test_check_catches_a_missing_page(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp)
            for part in ("chapters", "docs", "results"):
                shutil.copytree(source_root() / part, copy / part,
                                ignore=shutil.ignore_patterns("*.png"))
            (copy / "docs" / "14_batch.md").unlink()
            result = check(copy)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("docs/14_batch.md: missing", result.stdout)


if __name__ == "__main__":
    unittest.main()
