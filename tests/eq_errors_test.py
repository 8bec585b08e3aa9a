"""Provider errors on demand, end to end over simnic.

EFA reports errors of its own internal operations on the endpoint's event
queue. simnic raises one on demand (SIMNIC_EQ_ERROR=<file>: when the file
appears, the event queues of the domain it names, or of every domain when
it is empty, report one error each). Checked here:
- an error raised on the server between transfers (front door and data
  NICs) is reported in one line and does not abandon the next, healthy
  transfer;
- an error on a client's NIC ends that client in one line, long before its
  --timeout, and the server serves the next client.
And canceled sends (SIMNIC_CANCEL_SENDS=<n>: a process's first n sends
complete with FI_ECANCELED, as tcp's do when the server closes the
connection under them): a client sends a canceled message again, a few
times, then ends in one line.
Every wait is bounded.
"""
import os
import pathlib
import signal
import subprocess
import sys
import time
import unittest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", ".")) / os.environ.get(
    "TEST_WORKSPACE", "")
sys.path.insert(0, str(RUNFILES / "maint"))
from peer_processes import chapter_binary, read, wait_for, work_folder  # noqa: E402
CHAPTER = "18_more"
LAYOUT = ["--provider", "simnic", "--memory", "host", "--gpus", "1", "--nics-per-gpu", "2",
          "--buffer-size", "1048576"]
CLIENT = ["--page-size", "4096", "--pages", "64", "--connect-timeout", "30"]
os.environ["SIMNIC_QUIET"] = "1"


def binary(name):
    return chapter_binary(CHAPTER, name)


class EqErrorsTest(unittest.TestCase):
    def setUp(self):
        self.workdir = work_folder(self, "eq_errors_")
        self.trigger = os.path.join(self.workdir, "server-eq-error")
        self.server = None
        self.start_server("3")

    def start_server(self, repeat):
        self.stop_server()
        self.log = os.path.join(self.workdir, f"server-{repeat}.log")
        self.address_file = os.path.join(self.workdir, f"address-{repeat}")
        env = dict(os.environ, SIMNIC_EQ_ERROR=self.trigger)
        with open(self.log, "w") as out:
            self.server = subprocess.Popen(
                [binary("server"), "--repeat", repeat, "--address-file", self.address_file] +
                LAYOUT, cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        if not wait_for(lambda: "Waiting for a client" in read(self.log), 60):
            self.server.kill()
            self.fail("server did not start:\n" + read(self.log)[-2000:])

    def tearDown(self):
        self.stop_server()

    def stop_server(self):
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGINT)
            try:
                self.server.wait(30)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()

    def start_client(self, tag, env=None):
        log = os.path.join(self.workdir, f"client-{tag}.log")
        address = read(self.address_file).strip()
        with open(log, "w") as out:
            p = subprocess.Popen([binary("client"), "--server", address] + LAYOUT + CLIENT,
                                 cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, **(env or {})), start_new_session=True)
        return p, log

    def client(self, tag, env=None, timeout=90):
        p, log = self.start_client(tag, env)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        return p.returncode, read(log)

    def good_client(self, tag):
        code, log = self.client(tag)
        self.assertEqual(code, 0, f"client {tag}:\n{log[-1500:]}\nserver:\n{read(self.log)[-2500:]}")
        self.assertIn("every byte correct", log)

    def test_an_error_between_transfers_does_not_abandon_the_next(self):
        self.good_client("first")
        # Between transfers: once the server waits again. Until then its
        # transfer watch still reads the data NICs' event queues (the client
        # may finish verifying before the server ends the transfer).
        self.assertTrue(wait_for(lambda: read(self.log).count("Waiting for a client") >= 2, 20),
                        read(self.log)[-2500:])
        # Every domain: the front door (on NIC 0's) and both data NICs.
        pathlib.Path(self.trigger).write_text("")
        self.assertTrue(
            wait_for(lambda: read(self.log).count("reported an error between transfers") >= 3, 20),
            read(self.log)[-2500:])
        self.assertIn("injected event queue error", read(self.log))
        self.assertFalse(os.path.exists(self.trigger))
        # The rebuilt front door may have a new address: the file says which.
        self.assertTrue(wait_for(lambda: "recovered from it" in read(self.log), 10))
        self.good_client("second")
        # Only one NIC this time, then a client. The server reads the error
        # at its next look between transfers; on a busy machine a client
        # started at once could begin its transfer first, and an error
        # during a transfer abandons it (the case of the tests below).
        pathlib.Path(self.trigger).write_text("simnic1\n")
        self.assertTrue(
            wait_for(lambda: read(self.log).count("reported an error between transfers") >= 4, 20),
            read(self.log)[-2500:])
        self.assertTrue(wait_for(lambda: read(self.log).count("recovered from it") >= 2, 10),
                        read(self.log)[-2500:])
        self.good_client("third")
        # The client may finish verifying before the server prints its line.
        self.assertTrue(wait_for(lambda: read(self.log).count("Transfer done") == 3, 20),
                        read(self.log)[-2500:])
        self.assertNotIn("Transfer abandoned", read(self.log))
        self.assertIsNone(self.server.poll(), "the server must keep serving")

    def test_an_error_on_a_client_nic_ends_it_in_one_line(self):
        trigger = os.path.join(self.workdir, "client-eq-error")
        pathlib.Path(trigger).write_text("")
        start = time.monotonic()
        code, log = self.client("hit", env={"SIMNIC_EQ_ERROR": trigger})
        self.assertEqual(code, 1, log[-1500:])
        # Its --timeout is 300 s: the error, not the deadline, ended it.
        self.assertLess(time.monotonic() - start, 60)
        errors = [line for line in log.splitlines() if "error:" in line]
        self.assertEqual(len(errors), 1, log[-1500:])
        self.assertIn("a NIC reported an error", errors[0])
        self.assertIn("injected event queue error", errors[0])
        self.good_client("next")

    def test_an_error_while_the_client_waits_for_the_writes_ends_it_in_one_line(self):
        self.start_server("3000")  # a transfer of several seconds (simnic's line rate)
        trigger = os.path.join(self.workdir, "client-eq-error-waiting")
        start = time.monotonic()
        p, log = self.start_client("waiting", env={"SIMNIC_EQ_ERROR": trigger})
        self.assertTrue(wait_for(lambda: "Sent RANDOM_FILL" in read(log), 60), read(log))
        pathlib.Path(trigger).write_text("simnic1")  # the client's second NIC only
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            self.fail("the client did not notice the error:\n" + read(log)[-1500:])
        self.assertEqual(p.returncode, 1, read(log)[-1500:])
        self.assertLess(time.monotonic() - start, 90)
        self.assertNotIn("every byte correct", read(log))
        errors = [line for line in read(log).splitlines() if "error:" in line]
        self.assertEqual(len(errors), 1, read(log)[-1500:])
        self.assertIn("a NIC reported an error: simnic1", errors[0])

    def test_a_canceled_send_is_sent_again(self):
        code, log = self.client("canceled-once", env={"SIMNIC_CANCEL_SENDS": "1"})
        self.assertEqual(code, 0, log[-1500:])
        self.assertIn("canceled our CONNECT", log)
        self.assertIn("every byte correct", log)

    def test_a_send_canceled_again_and_again_ends_the_client_in_one_line(self):
        code, log = self.client("canceled-always", env={"SIMNIC_CANCEL_SENDS": "100"})
        self.assertEqual(code, 1, log[-1500:])
        errors = [line for line in log.splitlines() if "error:" in line]
        self.assertEqual(len(errors), 1, log[-1500:])
        self.assertIn("cannot reach the server with CONNECT", errors[0])
        self.assertIn("canceled", errors[0].lower())
        self.good_client("after")


if __name__ == "__main__":
    unittest.main()
