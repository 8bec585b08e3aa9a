"""cuda_copy_probe's command line: --help, bad flags rejected with one line and
exit status 2, and on a machine without a GPU (or a build without CUDA) one
error line and exit status 1, never a crash."""
import os
import pathlib
import subprocess
import unittest

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
PROBE = RUNFILES / "maint" / "probes" / "cuda_copy_probe"


def run(*args):
    return subprocess.run([str(PROBE), *args], capture_output=True, text=True, timeout=60)


class CudaCopyProbeTest(unittest.TestCase):
    def test_help_names_both_modes(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ipc-handle", r.stdout)
        self.assertIn("copy", r.stdout)

    def test_bad_flags_are_one_line_errors(self):
        for args in (["--mode", "bogus"], ["--threads", "0"], ["--size", "x"], ["--nope", "1"],
                     ["--size"]):
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn("cuda_copy_probe: error:", r.stderr)

    @unittest.skipIf(pathlib.Path("/dev/nvidia0").exists(), "a GPU is present")
    def test_without_a_gpu_each_mode_fails_cleanly(self):
        for mode in ("copy", "ipc-handle"):
            with self.subTest(mode=mode):
                r = run("--mode", mode, "--copies", "10", "--max-seconds", "1")
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn("cuda_copy_probe: error:", r.stderr)
                # Built without CUDA, or with it (CI's CUDA_HOME step) and no driver.
                self.assertTrue("built without CUDA" in r.stderr
                                or "no usable CUDA device" in r.stderr, r.stderr)


if __name__ == "__main__":
    unittest.main()
