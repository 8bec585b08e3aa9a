"""Checks that each chapter still prints what its page's "What you should see" shows.

Runs maint/capture_output.py --check on the chapters' binaries that Bazel
built (one short run of each over shm, host memory) against the checked-in
transcripts in docs/output/ (maint/docs_diff.py copies them into the pages,
and //docs:docs_check_test checks that copy). Also makes sure that the
check catches a transcript that no longer matches, and that the
placeholders cover what varies between runs.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
TOOL = RUNFILES / "maint" / "capture_output.py"


def capture(*flags):
    return subprocess.run([sys.executable, str(TOOL), "--root", str(RUNFILES), "--bin-dir",
                           str(RUNFILES / "chapters"), *flags],
                          capture_output=True, text=True, timeout=300)


def tool():
    sys.path.insert(0, str(TOOL.parent))
    import capture_output  # noqa: E402
    return capture_output


class OutputCheckTest(unittest.TestCase):
    def test_every_chapter_prints_its_transcript(self):
        chapters = sorted(p.stem for p in (RUNFILES / "docs" / "output").glob("*.txt"))
        self.assertEqual(chapters, tool().chapters(RUNFILES))
        result = capture("--check", "--out", str(RUNFILES / "docs" / "output"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_check_catches_a_transcript_that_drifted(self):
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
            out = pathlib.Path(tmp) / "output"
            shutil.copytree(RUNFILES / "docs" / "output", out)
            page = out / "10_warmup.txt"
            text = page.read_text()
            self.assertIn("Warmup completed.\n", text)
            page.write_text(text.replace("Warmup completed.\n", ""))
            result = capture("--check", "--out", str(out), "--chapters", "10_warmup")
            self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
            self.assertIn("+Warmup completed.", result.stdout)
            self.assertIn("the output of 10_warmup differs", result.stdout)

    def test_what_varies_becomes_a_placeholder(self):
        normalise = tool().normalise
        a = ("libfabric 1.17 (API 1.17), provider shm\n"
             "host  -    0     0-1    shm/shm#0, shm/shm#1\n"
             "Server address: 66695f73686d3a2f2f31383231373a303a3000\n"
             "Filled 2 buffer(s) with 400.00 KiB of random data each in 0.000 s.\n"
             "[   0.008s] ops 1000/1000, posted 1000 | 3.91 MiB | 4.044 Gbps | "
             "6.0% of 1 Gbps | 0.123 Mops/s\n"
             "All 2 NIC(s) reported the last write after 0.018 s.\n")
        b = ("libfabric 2.6.0 (API 2.0), provider shm\n"
             "host  -    1     12-23  shm/shm#0, shm/shm#1\n"
             "Server address: 66695f73686d3a2f2f393939393a303a3000\n"
             "Filled 2 buffer(s) with 400.00 KiB of random data each in 1.250 s.\n"
             "[  12.345s] ops 1000/1000, posted 1000 | 3.91 MiB | 140.500 Gbps | "
             "97.5% of 1 Gbps | 12.500 Mops/s\n"
             "All 2 NIC(s) reported the last write after 10.000 s.\n")
        # The counts stay: they are the same on every run.
        self.assertIn("ops 1000/1000, posted 1000 | 3.91 MiB", normalise(a))
        self.assertNotIn("0.008", normalise(a))
        self.assertEqual(normalise(a), normalise(b))

    def test_a_missing_binary_is_one_line(self):
        result = subprocess.run([sys.executable, str(TOOL), "--root", str(RUNFILES), "--check",
                                 "--bin-dir", "/nonexistent", "--chapters", "09_multinet"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertIn("bazel build //chapters/...", result.stderr)


if __name__ == "__main__":
    unittest.main()
