"""tools/serve_forever.sh with a stand-in server (a few lines of Python
that end with the exit code they are told): it starts the server again
only after exit code 3, passes SIGINT and SIGTERM on, and gives up after
SERVE_FOREVER_MAX_RESTARTS. The real server under the loop:
//tests:reliability_test (OversizedMessage)."""
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = pathlib.Path(__file__).resolve().parent
LOOP = str(HERE / "serve_forever.sh")
# Exits with the next code of its list file (one per start), or, at the
# list's end, waits for SIGINT/SIGTERM and exits 0.
STAND_IN = """
import pathlib, signal, sys, time
codes = pathlib.Path(sys.argv[1])
left = codes.read_text().split()
starts = pathlib.Path(sys.argv[2])
starts.write_text(starts.read_text() + "start\\n" if starts.exists() else "start\\n")
if left:
    codes.write_text(" ".join(left[1:]))
    sys.exit(int(left[0]))
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("Waiting for a client", flush=True)
for _ in range(600):
    time.sleep(0.1)
sys.exit(9)
"""


class ServeForeverTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(tmp.cleanup)
        self.dir = pathlib.Path(tmp.name)
        (self.dir / "server.py").write_text(STAND_IN)
        self.codes = self.dir / "codes"
        self.starts = self.dir / "starts"
        self.out = self.dir / "out"

    def start(self, codes, **env):
        self.codes.write_text(" ".join(str(c) for c in codes))
        environment = dict(os.environ, SERVE_FOREVER_PAUSE="0.05", **env)
        with open(self.out, "w") as out:
            return subprocess.Popen(
                [LOOP, sys.executable, str(self.dir / "server.py"), str(self.codes),
                 str(self.starts)], stdout=out, stderr=subprocess.STDOUT, env=environment)

    def started(self):
        return self.starts.read_text().count("start") if self.starts.exists() else 0

    def wait_waiting(self):
        deadline = time.monotonic() + 20
        while "Waiting for a client" not in self.out.read_text():
            self.assertLess(time.monotonic(), deadline, self.out.read_text())
            time.sleep(0.02)

    def test_code_3_starts_it_again_and_a_signal_stops_both(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(signal=sig.name):
                self.starts.unlink(missing_ok=True)
                loop = self.start([3, 3])
                self.wait_waiting()
                loop.send_signal(sig)
                self.assertEqual(loop.wait(20), 0, self.out.read_text())
                self.assertEqual(self.started(), 3)
                text = self.out.read_text()
                self.assertEqual(text.count("as process "), 3, text)
                self.assertIn("(restart 2 of at most 100)", text)

    def test_other_codes_end_the_loop_with_them(self):
        for code in (0, 1, 2):
            with self.subTest(code=code):
                self.starts.unlink(missing_ok=True)
                loop = self.start([3, code])
                self.assertEqual(loop.wait(20), code, self.out.read_text())
                self.assertEqual(self.started(), 2)

    def test_it_gives_up_after_the_most_restarts(self):
        loop = self.start([3, 3, 3, 3], SERVE_FOREVER_MAX_RESTARTS="2")
        self.assertEqual(loop.wait(20), 3, self.out.read_text())
        self.assertEqual(self.started(), 3)
        self.assertIn("serve_forever: error: the server failed 3 times; giving up",
                      self.out.read_text())

    def test_no_command_is_a_usage_error(self):
        self.assertEqual(subprocess.run([LOOP], capture_output=True).returncode, 2)


if __name__ == "__main__":
    unittest.main()
