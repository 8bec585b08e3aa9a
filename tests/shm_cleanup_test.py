"""A client given a malformed shm --server leaves other programs' files alone.

The client runs in a private mount namespace whose /dev/shm is a fresh
tmpfs holding files of other programs (a semaphore, a database's segment,
files of another user's dead process, files of a live process). Each
malformed address must end with one error line and leave every one of them;
an address that names a dead process of our own uid may take that
process's endpoint files, and only those. Needs root (unshare, mount); the
namespace and its tmpfs vanish with the process, nothing outside changes.
"""
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.environ.get("TEST_SRCDIR", "."),
                                os.environ.get("TEST_WORKSPACE", ""), "maint"))
import peer_processes  # noqa: E402

DEAD_PID = 4000000  # above any pid_max Linux allows (4194304 is the limit): never alive
OTHERS = ["sem.database", "PostgreSQL.1234", f"{DEAD_PID}:{os.getuid() + 1000}:0",
          f"{DEAD_PID}0:{os.getuid()}:0", f"{DEAD_PID}:{os.getuid()}:0x"]
OWN_DEAD = [f"{DEAD_PID}:{os.getuid()}:0", f"{DEAD_PID}:{os.getuid()}:1"]
MALFORMED = ["fi_shm://4000000:x", "fi_shm://:", "fi_shm://", "fi_shm://4000000",
             "fi_shm://4000000:0", "fi_shm://4000000:0:", "fi_shm://../../etc/passwd",
             "fi_shm://4000000:0:0/..", "sem.database", "\x1b[2J"]

SCRIPT = r"""
set -e
mount -t tmpfs -o size=64m tutorial-test-shm /dev/shm
cd /dev/shm
while [ "$#" -gt 1 ]; do : > "$1"; shift; done
sleep 1000 & live=$!
: > "$live:$(id -u):0"
rc=0
"$CLIENT" --provider shm --memory host --gpus 1 --nics-per-gpu 2 --timeout 5 --server "$1" \
    >"$LOG" 2>&1 || rc=$?
kill $live
echo "rc=$rc"
ls -A /dev/shm | grep -v "^$live:" || true
"""


def hex_address(text):
    return (text.encode("latin-1") + b"\0").hex()


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("unshare"),
                     "needs root and unshare for a private /dev/shm")
class ShmCleanupTest(unittest.TestCase):
    def run_client(self, server, files):
        log = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "client.log")
        env = dict(os.environ, CLIENT=peer_processes.chapter_binary("14_batch", "client"),
                   LOG=log)
        run = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                              SCRIPT, "script", *files, server],
                             capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        lines = run.stdout.split("\n")
        rc = int(lines[0].split("=")[1])
        left = sorted(line for line in lines[1:] if line)
        with open(log, errors="replace") as f:
            output = f.read()
        os.remove(log)
        return rc, left, output

    def test_malformed_addresses_remove_nothing(self):
        for text in MALFORMED:
            with self.subTest(address=text):
                rc, left, output = self.run_client(hex_address(text), OTHERS + OWN_DEAD)
                self.assertNotEqual(rc, 0, output)
                errors = [line for line in output.split("\n") if ": error: " in line]
                self.assertEqual(len(errors), 1, output)
                self.assertNotIn("\x1b", output)
                self.assertEqual(left, sorted(OTHERS + OWN_DEAD), output)

    def test_not_hex_at_all(self):
        rc, left, output = self.run_client("fi_shm://zz", OTHERS)
        self.assertNotEqual(rc, 0, output)
        self.assertEqual(left, sorted(OTHERS), output)

    def test_a_dead_process_of_ours_loses_only_its_own_files(self):
        rc, left, output = self.run_client(hex_address(f"fi_shm://{OWN_DEAD[0]}"),
                                           OTHERS + OWN_DEAD)
        self.assertNotEqual(rc, 0, output)
        self.assertEqual(left, sorted(OTHERS), output)


if __name__ == "__main__":
    unittest.main()
