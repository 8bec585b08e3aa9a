"""docs/troubleshooting.md names every error message the programs can print.

maint/error_messages.py extracts the messages from the code (its docstring
says which calls count and how a message's stem is cut); this test fails
when the page lacks one, and checks that the extraction sees a new message
in each of the kinds of call it reads.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]


def source_root():
    """The checkout: Bazel's runfiles link docs/README.md to it."""
    return (RUNFILES / "docs" / "README.md").resolve().parent.parent


sys.path.insert(0, str(source_root() / "maint"))
import error_messages  # noqa: E402


class TroubleshootingTest(unittest.TestCase):
    def test_the_page_has_every_message(self):
        run = subprocess.run([sys.executable, str(source_root() / "maint" / "error_messages.py"),
                              "--check", str(source_root() / "docs" / "troubleshooting.md")],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)

    def test_every_kind_of_call_is_read(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            for part in ("common", "chapters", "simnic"):
                shutil.copytree(source_root() / part, root / part,
                                ignore=shutil.ignore_patterns("BUILD.bazel"))
            extra = root / "common" / "extra.cc"
            extra.write_text(
                'void A() { throw UsageError("--frobs must be odd, got " + n); }\n'
                'void B() { throw RuntimeError(name_ + ": the gizmo melted"); }\n'
                'void C() { return Fail("pump on " + net.name() + ": dry"); }\n'
                'void D() { std::fprintf(stderr, "%s: warning: %llu widgets lost\\n", p, n); }\n'
                'void E() { std::printf("Note: the frobnicator failed once\\n"); }\n'
                'void F() { std::printf("Transfer done in %.3f s\\n", s); }\n')
            found = error_messages.messages(root)
            for stem in ("--frobs must be odd, got", "the gizmo melted", "pump on",
                         "widgets lost",
                         "Note: the frobnicator failed once"):
                self.assertTrue(any(stem in s for s in found), (stem, sorted(found)[:5]))
            self.assertNotIn("Transfer done in", found)  # progress, not an error
            page = root / "page.md"
            page.write_text((source_root() / "docs" / "troubleshooting.md").read_text())
            run = subprocess.run([sys.executable,
                                  str(source_root() / "maint" / "error_messages.py"),
                                  "--root", str(root), "--check", str(page)],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 1)
            self.assertIn('no entry for "the gizmo melted"', run.stdout)


if __name__ == "__main__":
    unittest.main()
