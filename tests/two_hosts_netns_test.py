"""Two hosts over tcp, on one machine: a chapter's server and client in two
network namespaces joined by a veth pair.

Each namespace is a host of its own as far as the network goes: its own
interfaces, addresses and routes. The server runs in one (10.99.0.1/24 on
its end of the pair), the client in the other (10.99.0.2/24), both with
`--provider tcp --domain <that namespace's interface>`, so every byte
crosses the veth pair as it would cross a wire between two machines. The
test checks that the client verified every byte and that the server
reports the whole transfer.

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and `ip` (iproute2); where
namespaces cannot be made it skips, saying why. The namespaces (and with
them the veth pair) are removed at the end, also when a check fails or the
test is stopped with SIGTERM (Bazel's timeout); every wait has a limit.

  bazel test //tests:two_hosts_netns_test
  python3 tools/test_log.py two_hosts_netns_test   # what it did: its summary
  python3 tests/two_hosts_netns_test.py      # as root, after bazel build //chapters/15_lazy:all

At the end it prints a summary (the "two hosts:" lines: namespaces,
interfaces, addresses, what each side printed about its NICs and the
transfer) into its log, so that a workshop sees what crossed the veth pair.
"""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

CHAPTER = "15_lazy"
SERVER_IP, CLIENT_IP = "10.99.0.1/24", "10.99.0.2/24"
PAGE, PAGES, REPEAT = 65536, 200, 5
TAG = f"tut{os.getpid() % 100000}"  # unique on this machine: namespaces are global
NS = {"server": f"{TAG}s", "client": f"{TAG}c"}
IFACE = {"server": f"{TAG}vs", "client": f"{TAG}vc"}  # at most 15 characters


def chapter_dir():
    if "TEST_SRCDIR" in os.environ:
        return pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"] / \
            "chapters" / CHAPTER
    return pathlib.Path(__file__).resolve().parent.parent / "bazel-bin" / "chapters" / CHAPTER


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20,
                          check=check)


def remove_namespaces():
    if not shutil.which("ip"):
        return
    for ns in NS.values():
        # Deleting a namespace deletes the veth end inside it, and with it the pair.
        ip("netns", "delete", ns, check=False)


def make_namespaces():
    """Two namespaces joined by a veth pair, or the reason they cannot be made."""
    if not shutil.which("ip"):
        return "no `ip` command (Debian: apt-get install iproute2; tools/setup.sh installs it)"
    remove_namespaces()  # left by an earlier run of the same pid that was killed
    result = ip("netns", "add", NS["server"], check=False)
    if result.returncode != 0:
        return (f"cannot make a network namespace (`ip netns add` says: "
                f"{result.stderr.strip()}); it needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN")
    try:
        ip("netns", "add", NS["client"])
        ip("link", "add", IFACE["server"], "type", "veth", "peer", "name", IFACE["client"])
        for side, address in (("server", SERVER_IP), ("client", CLIENT_IP)):
            ip("link", "set", IFACE[side], "netns", NS[side])
            ip("-n", NS[side], "addr", "add", address, "dev", IFACE[side])
            ip("-n", NS[side], "link", "set", IFACE[side], "up")
            ip("-n", NS[side], "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        return f"cannot set up the veth pair: `{' '.join(e.cmd)}` says: {e.stderr.strip()}"
    return None


def in_namespace(side, argv, **kwargs):
    return subprocess.Popen(["ip", "netns", "exec", NS[side], *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kwargs)


class TwoHostsOverTcpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Bazel stops a test that runs too long with SIGTERM: clean up then too.
        cls.previous = signal.signal(signal.SIGTERM, lambda *_: (remove_namespaces(),
                                                                  sys.exit(143)))
        why = make_namespaces()
        if why:
            remove_namespaces()
            print(f"two_hosts_netns_test: SKIPPED: {why}", file=sys.stderr, flush=True)
            raise unittest.SkipTest(why)

    @classmethod
    def tearDownClass(cls):
        remove_namespaces()
        signal.signal(signal.SIGTERM, cls.previous)

    def kill_at_end(self, process):
        def stop():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        self.addCleanup(stop)

    def test_client_in_one_namespace_verifies_a_server_in_the_other(self):
        bins = chapter_dir()
        self.assertTrue((bins / "server").exists(), f"{bins}/server: build it first")
        tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(tmp.cleanup)
        address_file = pathlib.Path(tmp.name) / "address"
        result_file = pathlib.Path(tmp.name) / "server.json"
        layout = ["--provider", "tcp", "--memory", "host", "--gpus", "1", "--nics-per-gpu", "2",
                  "--buffer-size", str(PAGE * PAGES)]
        server = in_namespace("server", [
            str(bins / "server"), *layout, "--domain", IFACE["server"], "--once",
            "--repeat", str(REPEAT), "--address-file", str(address_file),
            "--result-json", str(result_file)])
        self.kill_at_end(server)
        deadline = time.monotonic() + 30
        while not (address_file.exists() and address_file.read_text().strip()):
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                self.fail(f"the server did not start within 30 s:\n{server.communicate()[0]}")
            time.sleep(0.1)
        address = address_file.read_text().strip()

        client = in_namespace("client", [
            str(bins / "client"), *layout, "--domain", IFACE["client"], "--server", address,
            "--page-size", str(PAGE), "--pages", str(PAGES), "--timeout", "60"])
        self.kill_at_end(client)
        try:
            client_out, _ = client.communicate(timeout=90)
            server_out, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            client.kill()
            server.kill()
            self.fail("no result within 90 s:\n" + client.communicate()[0] +
                      server.communicate()[0])
        both = f"client:\n{client_out}\nserver:\n{server_out}"
        self.assertEqual(client.returncode, 0, both)
        self.assertEqual(server.returncode, 0, both)
        # The server's endpoints are on its namespace's interface, not lo.
        self.assertIn(f"tcp/{IFACE['server']}#0", server_out)
        self.assertIn(f"tcp/{IFACE['client']}#0", client_out)
        self.assertIn(f"Verified {2 * PAGES} page(s)", client_out)
        self.assertIn("every byte correct", client_out)
        record = json.loads(result_file.read_text().splitlines()[-1])
        self.assertEqual(record["bytes"], 2 * PAGES * REPEAT * PAGE, record)
        print_summary(server_out, client_out)


def print_summary(server_out, client_out):
    """What a workshop wants to see, in the test's log (tools/test_log.py)."""
    def picked(out, words):
        return [line.strip() for line in out.splitlines()
                if any(w in line for w in words) and "bazel run" not in line]
    lines = [f"namespace {NS['server']}: server on {IFACE['server']} {SERVER_IP}",
             f"namespace {NS['client']}: client on {IFACE['client']} {CLIENT_IP}",
             "a veth pair joins them: every byte below crossed it over tcp"]
    lines += [f"server| {line}" for line in picked(server_out, (
        "provider tcp", f"tcp/{IFACE['server']}", "Warmup completed", "Transfer done"))]
    lines += [f"client| {line}" for line in picked(client_out, (
        f"tcp/{IFACE['client']}", "reported the last write", "Verified"))]
    print("\n".join(f"two hosts: {line}" for line in lines), flush=True)


if __name__ == "__main__":
    unittest.main()
