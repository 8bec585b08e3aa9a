"""A hostile peer harms neither the server nor the other clients.

Against one real server (chapter 10's) per case, over shm and tcp, a real
attacker process (tests/attacker.cc, the real protocol's messages) attacks
while five good clients come one after another: a flood of RANDOM_FILLs, a
flood of CONNECTs, one CONNECT every few seconds that no RANDOM_FILL
follows (owed connects), malformed addresses (in CONNECTs, and sessions
naming random addresses), a client that stops reading in the middle of
its transfer, and forged sessions: CONNECTs that declare a bystander's
address and regions, each followed by a RANDOM_FILL with a guessed cookie;
and forged NICs: CONNECTs whose session and NIC 0 are the attacker's own
(it echoes its cookie correctly) but whose other NICs and regions are the
bystander's (the bystander's memory must stay untouched in both). A
malformed --server on the client's side, and RDMA WRITEs with guessed keys
straight into a bystander over tcp, and a tcp connection held silent
across the end of a flood, are cases of their own. Spoofed
CONNECTs (tcp: each names a new address of this host where nobody
listens) run only when ATTACK_MODES names them: against a sustained flood
of them good clients lose (docs/protocol.md, "A front door no flood can
sink").

Each case: all five good clients verified, the server alive at the end, and
its resident memory after the attack within 20% of before it (measured after
two good clients that came at once, so that the server has set up what any
server in use has: see warm_up).

Bounded: ATTACK_SECONDS of attack per case (CI: 6; the issue's full run:
ATTACK_SECONDS=40, where the five clients come spread over the attack),
every wait has a deadline. ATTACK_PROVIDERS and ATTACK_MODES pick cases.
"""
import concurrent.futures
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", ".")) / os.environ.get(
    "TEST_WORKSPACE", "")
sys.path.insert(0, str(RUNFILES / "maint"))
from peer_processes import (  # noqa: E402
    stop as stop_process, chapter_binary, read, tcp_ports, wait_for)

CHAPTER = "10_warmup"
SECONDS = float(os.environ.get("ATTACK_SECONDS", "6"))
PROVIDERS = os.environ.get("ATTACK_PROVIDERS", "shm,tcp").split(",")
MODES = os.environ.get("ATTACK_MODES",
                       "fills,connects,owed,malformed,stop,forged,nic-forged").split(",")
# Cases known to fail now and then, left out by default: none now
# (ATTACK_KNOWN_FAILING=tcp:connects,... names some; docs/protocol.md,
# "What holds on which provider").
KNOWN_FAILING = [c for c in os.environ.get("ATTACK_KNOWN_FAILING", "").split(",") if c]
# What the server prints when its front door takes messages in the
# provider's own buffers (FI_BUFFERED_RECV): over tcp on libfabric 1.x.
BUFFERED_LINE = "Front door: messages arrive in the provider's buffers (FI_BUFFERED_RECV)"
# Cases whose server memory is reported, not asserted, by default: none
# now (ATTACK_MEMORY_UNCHECKED=tcp:fills,... names some).
MEMORY_UNCHECKED = [c for c in os.environ.get("ATTACK_MEMORY_UNCHECKED", "").split(",") if c]
GOOD_CLIENTS = 5
LAYOUT = ["--memory", "host", "--buffer-size", "1048576"]
CLIENT = ["--connect-timeout", "30", "--timeout", "90"]
# How often the server writes each page: about the same time per page on
# both providers (a WRITE over shm takes about 2 us, over tcp 25-75 us).
SERVER_REPEAT = {"shm": "200", "tcp": "20"}
# Requests whose transfer lasts long enough for a second client to arrive
# during it: 1,024 pages of 512 bytes take about a second over shm, one to
# three seconds over tcp on a loaded 2-core machine, where a client's start
# can take longer, so later tries ask for more pages (3,584 keeps the
# RANDOM_FILL under the 16 KiB that tcp on libfabric 1.x takes).
LONG_REQUESTS = (("--page-size", "512", "--pages", "1024"),
                 ("--page-size", "256", "--pages", "2048"),
                 ("--page-size", "256", "--pages", "3584"),
                 ("--page-size", "256", "--pages", "3584"))
# Owed connects: one CONNECT this often, as in the report.
OWED_INTERVAL = "5"
# What the server may grow by: 20%, or this much on a server this small
# (two 1 MiB buffers, 25-80 MB in all). The first flood it meets grows it
# once, by a few MB, while the provider's buffer pools are first used and
# kept; a server's GPU buffers make that a fraction of a percent. (During a
# flood libfabric 2.x's shm grows far more, about 33 KiB per unmatched
# message; that memory comes back when the front door is rebuilt.)
RSS_SLACK_KB = 8192
# How long the server may take to give back a flood's memory over shm on
# libfabric 2.x (its front door is rebuilt 10 s after the last message; 2 s
# of those have passed when this wait starts).
SHM2_REBUILD_WAIT = 20


def attacker_binary():
    path = RUNFILES / "tests" / "attacker"
    if not path.exists():  # run by hand from the workspace
        path = pathlib.Path("bazel-bin/tests/attacker").resolve()
    return str(path)


def rss_kb(pid, field="VmRSS"):
    for line in read(f"/proc/{pid}/status").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def libfabric_major(server_log):
    """The major version the server says it runs on ("libfabric 1.17.0 ...")."""
    match = re.search(r"^libfabric (\d+)\.", server_log, re.MULTILINE)
    return int(match.group(1)) if match else 0


class Server:
    def __init__(self, workdir, provider, tag):
        self.log = os.path.join(workdir, f"server-{tag}.log")
        self.address_file = os.path.join(workdir, f"address-{tag}")
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                [chapter_binary(CHAPTER, "server"), "--provider", provider,
                 "--repeat", SERVER_REPEAT[provider],
                 "--address-file", self.address_file] + LAYOUT,
                cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
        if not wait_for(lambda: "Waiting for a client" in read(self.log), 60):
            self.process.kill()
            raise AssertionError("server did not start:\n" + read(self.log)[-2000:])

    def address(self):
        return read(self.address_file).strip()

    def stop(self):
        return stop_process(self.process)


def good_client(workdir, provider, server, tag, extra=("--page-size", "4096", "--pages", "64")):
    log = os.path.join(workdir, f"client-{tag}.log")
    with open(log, "w") as out:
        try:
            code = subprocess.run(
                [chapter_binary(CHAPTER, "client"), "--provider", provider, "--server",
                 server.address()] + LAYOUT + CLIENT + list(extra),
                cwd=workdir, stdout=out, stderr=subprocess.STDOUT, timeout=150).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    text = read(log)
    return code == 0 and "every byte correct" in text, f"exit {code}: {text[-3000:]}"


class AttackTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="attack_")
        self.workdir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def warm_up(self, provider, server, tag):
        """Normal life before the attack: a client that comes while another
        one's transfer runs, and hears BUSY from the front door's own
        thread (whose first replies set up that thread's allocator arena
        and, over tcp, a connection's buffers: about 17 MB, once), so that
        "before" is a server in use. Each try makes the first transfer
        longer; the warm-up fails if no client heard BUSY, since "before"
        would then not include that growth."""
        for attempt, request in enumerate(LONG_REQUESTS):
            started = read(server.log).count("Started RDMA WRITE")
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                first = pool.submit(good_client, self.workdir, provider, server,
                                    f"{tag}-warm{attempt}a", request)
                wait_for(lambda: read(server.log).count("Started RDMA WRITE") > started, 30, 0.01)
                second = pool.submit(good_client, self.workdir, provider, server,
                                     f"{tag}-warm{attempt}b")
                for ok, why in (first.result(), second.result()):
                    self.assertTrue(ok, f"{tag}: a client before the attack: {why}")
            if "busy" in second.result()[1]:
                print(f"warm-up {tag}: a client heard BUSY (attempt {attempt + 1})", flush=True)
                break
        else:
            self.fail(f"{tag}: warm-up: no second client heard BUSY in "
                      f"{len(LONG_REQUESTS)} tries")
        time.sleep(0.5)

    def keep_logs(self, tag):
        """A failed case's logs (server, attacker, clients), for Bazel to
        keep in the test's outputs.zip (bazel-testlogs/tests/attack_test/
        test.outputs/)."""
        kept = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if not kept:
            return
        for name in os.listdir(self.workdir):
            if name.endswith(".log") and tag in name:
                shutil.copy(os.path.join(self.workdir, name), os.path.join(kept, name))

    def attack(self, provider, mode):
        tag = f"{provider}-{mode}"
        server = Server(self.workdir, provider, tag)
        try:
            startup = read(server.log)
            self.assertEqual(BUFFERED_LINE in startup,
                             provider == "tcp" and libfabric_major(startup) == 1,
                             f"{tag}: the front door's receive mode:\n{startup[-2000:]}")
            self.warm_up(provider, server, tag)
            before = rss_kb(server.process.pid)
            started = time.monotonic()
            attacker_log = os.path.join(self.workdir, f"attacker-{tag}.log")
            with open(attacker_log, "w") as out:
                attacker = subprocess.Popen(
                    [attacker_binary(), "--provider", provider, "--server", server.address(),
                     "--mode", mode, "--seconds", str(SECONDS), "--interval", OWED_INTERVAL],
                    cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT)
            try:
                time.sleep(min(1.0, SECONDS / 4))  # the attack is under way
                verified = 0
                failures = []
                for i in range(GOOD_CLIENTS):
                    ok, why = good_client(self.workdir, provider, server, f"{tag}-{i}")
                    verified += ok
                    if not ok:
                        failures.append(why)
                    # Spread over a long attack; back to back over a short one.
                    pause = (SECONDS - (time.monotonic() - started)) / (GOOD_CLIENTS - i)
                    if SECONDS > 20 and pause > 0:
                        time.sleep(pause)
                try:
                    attacker.wait(SECONDS + 30)
                except subprocess.TimeoutExpired:
                    attacker.kill()
                    attacker.wait()
            finally:
                if attacker.poll() is None:
                    attacker.kill()
                    attacker.wait()
            # The server drains what is left of the attack; after a flood it
            # then rebuilds its front door (harness/recovery.h,
            # FloodOverSeconds): over tcp 0.5 s after the last message, over
            # shm on libfabric 2.x 10 s after it.
            time.sleep(2.0)
            limit = max(before * 1.2, before + RSS_SLACK_KB)
            if provider == "shm" and libfabric_major(read(server.log)) >= 2:
                wait_for(lambda: rss_kb(server.process.pid) <= limit, SHM2_REBUILD_WAIT, 0.2)
            after = rss_kb(server.process.pid)
            peak = rss_kb(server.process.pid, "VmHWM")  # the most it held at once, ever
            alive = server.process.poll() is None
            log = read(server.log)
            if mode == "stop":
                # Its transfer started: the server had a peer that stopped reading.
                self.assertIn("stopped reading after its RANDOM_FILL", read(attacker_log),
                              f"{tag}: {read(attacker_log)}\n{log[-3000:]}")
            if mode in ("forged", "nic-forged"):
                # The attacker checks the bystander's memory itself.
                self.assertEqual(attacker.returncode, 0,
                                 f"{tag}: {read(attacker_log)}\n{log[-3000:]}")
                self.assertRegex(read(attacker_log), r"the bystander \(process \d+\) is untouched")
            print(f"attack {tag}: {read(attacker_log).strip()}; {verified}/{GOOD_CLIENTS} "
                  f"good clients verified; server RSS {before} kB before, {after} kB after "
                  f"({100.0 * (after - before) / max(before, 1):+.1f}%), {peak} kB at most; "
                  f"log {len(log)} bytes; {time.monotonic() - started:.1f} s", flush=True)
            self.assertTrue(alive, f"{tag}: the server died:\n{log[-3000:]}")
            self.assertEqual(verified, GOOD_CLIENTS,
                             f"{tag}: " + "\n".join(failures) + "\n" + log[-3000:])
            if f"{provider}:{mode}" in MEMORY_UNCHECKED:
                print(f"attack {tag}: memory not checked: known to grow now and then "
                      "(ATTACK_MEMORY_UNCHECKED= checks it)", flush=True)
            else:
                self.assertLessEqual(after, limit, f"{tag}: server memory grew\n{log[-3000:]}")
        except AssertionError:
            self.keep_logs(tag)
            raise
        finally:
            server.stop()

    def test_killed_tcp_server_is_reported_within_15_s(self):
        """tcp tells a client nothing when its server dies: the client's
        PROBEs go unanswered, and it says so within 15 s, not at its
        --timeout."""
        log = os.path.join(self.workdir, "server-killed.log")
        address_file = os.path.join(self.workdir, "address-killed")
        with open(log, "w") as out:
            server = subprocess.Popen(
                [chapter_binary(CHAPTER, "server"), "--provider", "tcp", "--repeat", "1000000",
                 "--address-file", address_file] + LAYOUT,
                cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT)
        try:
            self.assertTrue(wait_for(lambda: "Waiting for a client" in read(log), 60), read(log))
            client_log = os.path.join(self.workdir, "client-killed.log")
            with open(client_log, "w") as out:
                client = subprocess.Popen(
                    [chapter_binary(CHAPTER, "client"), "--provider", "tcp", "--server",
                     read(address_file).strip(), "--pages", "64", "--page-size", "4096",
                     "--timeout", "120"] + LAYOUT,
                    cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT)
            try:
                self.assertTrue(wait_for(lambda: "Started RDMA WRITE" in read(log), 60),
                                read(log) + read(client_log))
                time.sleep(1.0)  # mid-transfer
                server.kill()
                killed = time.monotonic()
                client.wait(60)
                seconds = time.monotonic() - killed
            finally:
                if client.poll() is None:
                    client.kill()
                    client.wait()
            text = read(client_log)
            print(f"attack: a SIGKILLed tcp server was reported by its client after "
                  f"{seconds:.1f} s: {text.strip().splitlines()[-1]}", flush=True)
            self.assertNotEqual(client.returncode, 0, text)
            self.assertIn("the server stopped answering", text)
            self.assertLessEqual(seconds, 15.0, text)
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()

    def test_half_made_connection_across_a_flood(self):
        """Over tcp a peer connects to the front door and sends nothing while
        a flood ends, then closes its socket. The server must stay alive and
        serve the next client: libfabric 2.x's tcp frees its listener's
        memory when the endpoint closes, and reads it when a connection it
        accepted before shows activity (docs/provider-failures.md)."""
        if "tcp" not in PROVIDERS:
            self.skipTest("tcp only")
        tag = "tcp-half-made"
        server = Server(self.workdir, "tcp", tag)
        try:
            self.warm_up("tcp", server, tag)
            flood = subprocess.run(
                [attacker_binary(), "--provider", "tcp", "--server", server.address(),
                 "--mode", "fills", "--seconds", "3"],
                cwd=self.workdir, capture_output=True, text=True, timeout=60)
            self.assertEqual(flood.returncode, 0, flood.stdout + flood.stderr)
            address = bytes.fromhex(server.address())  # a sockaddr_in
            port, host = int.from_bytes(address[2:4], "big"), socket.inet_ntoa(address[4:8])
            with socket.create_connection((host, port), timeout=10):
                time.sleep(2.0)  # the front door polls (accepts it); a flood is over
            time.sleep(0.5)
            log = read(server.log)
            self.assertIsNone(server.process.poll(), log[-3000:])
            # tcp;ofi_rxm (1.x) rebuilt its front door meanwhile; tcp on 2.x never does.
            rebuilt = "a flood at the front door is over" in log
            self.assertEqual(rebuilt, libfabric_major(log) < 2, log[-3000:])
            ok, why = good_client(self.workdir, "tcp", server, f"{tag}-good")
            self.assertTrue(ok, f"{tag}: good client: {why}")
            self.assertIsNone(server.process.poll(), read(server.log)[-3000:])
            print(f"attack {tag}: a connection held silent across the end of a flood; "
                  f"the server lived and served the next client", flush=True)
        finally:
            server.stop()

    def test_half_made_connections_to_data_endpoints(self):
        """Over tcp a peer connects to every data endpoint of the server
        during a transfer and sends nothing; the server rebuilds those
        endpoints when the transfer ends, the peer then closes its sockets.
        The server must stay alive and serve the next client (the same
        libfabric 2.x window as above)."""
        if "tcp" not in PROVIDERS:
            self.skipTest("tcp only")
        tag = "tcp-half-made-data"
        server = Server(self.workdir, "tcp", tag)
        try:
            self.warm_up("tcp", server, tag)
            door = int.from_bytes(bytes.fromhex(server.address())[2:4], "big")
            held = []
            for attempt, request in enumerate(LONG_REQUESTS):
                started = read(server.log).count("Started RDMA WRITE")
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    during = pool.submit(good_client, self.workdir, "tcp", server,
                                         f"{tag}-during{attempt}", request)
                    self.assertTrue(wait_for(
                        lambda: read(server.log).count("Started RDMA WRITE") > started, 60, 0.01))
                    ports = set(tcp_ports(server.process.pid)) - {door}
                    self.assertTrue(ports, "no data endpoint listens")
                    held += [socket.create_connection(("127.0.0.1", port), timeout=10)
                             for port in sorted(ports)]
                    # The server's provider accepted them (its progress runs
                    # while the transfer does) unless the transfer ended first.
                    wait_for(lambda: ports & set(tcp_ports(server.process.pid, "01")),
                             10, 0.01)
                    ok, why = during.result()
                    self.assertTrue(ok, f"{tag}: the client during: {why}")
                # Still open in the server after the rebuild: nobody closes them.
                accepted = [p for p in tcp_ports(server.process.pid, "01") if p in ports]
                if accepted:
                    break
            self.assertTrue(accepted, f"{tag}: no data endpoint accepted a connection "
                            f"in {len(LONG_REQUESTS)} transfers")
            time.sleep(0.5)  # the server has rebuilt its data endpoints
            for connection in held:
                connection.close()
            for i in range(2):
                ok, why = good_client(self.workdir, "tcp", server, f"{tag}-{i}")
                self.assertTrue(ok, f"{tag}: good client {i}: {why}\nserver: "
                                f"{read(server.log)[-1500:]}")
            self.assertIsNone(server.process.poll(), read(server.log)[-3000:])
            print(f"attack {tag}: {len(accepted)} silent connection(s) accepted by data "
                  f"endpoints held across their rebuild (try {attempt + 1}); the server "
                  f"lived and served the next clients",
                  flush=True)
        finally:
            server.stop()

    def test_lost_fill_hears_busy(self):
        """A client whose RANDOM_FILL was lost (a flood pushed it out, a
        rebuilt front door lost it) PROBEs a server that is between
        transfers: it hears BUSY, its sign to send both messages again,
        within a few PROBEs, not silence or ALIVE until its --timeout; the
        server then serves a good client."""
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                tag = f"{provider}-forgotten"
                server = Server(self.workdir, provider, tag)
                try:
                    done = subprocess.run(
                        [attacker_binary(), "--provider", provider, "--server",
                         server.address(), "--mode", "forgotten", "--seconds", "20"],
                        cwd=self.workdir, capture_output=True, text=True, timeout=60)
                    print(f"attack {tag}: {done.stdout.strip() or done.stderr.strip()}",
                          flush=True)
                    self.assertEqual(done.returncode, 0, done.stdout + done.stderr +
                                     read(server.log)[-2000:])
                    self.assertIn("heard BUSY", done.stdout)
                    ok, why = good_client(self.workdir, provider, server, f"{tag}-good")
                    self.assertTrue(ok, f"{tag}: good client: {why}")
                finally:
                    server.stop()

    def test_clients_with_malformed_server_addresses(self):
        """The other side: clients started with a --server the provider must
        refuse each end with a one-line error (no signal, no hang), and the
        server, which they may have reached or not, serves five good clients
        after them."""
        malformed = {
            "shm": [b"fi_shm".hex(),                      # no NUL, no name
                    (b"fi_shm://no-such-endpoint" + b"\0").hex(),
                    (b"fi_shm://" + b"\x01" * 8 + b"\0").hex()],
            "tcp": [bytes([2, 0, 0, 1]).hex(),            # no sockaddr_in
                    bytes(16).hex(),                      # family 0
                    bytes([2, 0, 0, 0, 127, 0, 0, 1] + [0] * 8).hex()],  # port 0
        }
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                tag = f"{provider}-malformed-server"
                server = Server(self.workdir, provider, tag)
                try:
                    self.warm_up(provider, server, tag)
                    before = rss_kb(server.process.pid)
                    for i, address in enumerate(malformed[provider] + ["zz", "abc"]):
                        log = os.path.join(self.workdir, f"client-{tag}-bad{i}.log")
                        with open(log, "w") as out:
                            code = subprocess.run(
                                [chapter_binary(CHAPTER, "client"), "--provider", provider,
                                 "--server", address, "--connect-timeout", "5", "--timeout",
                                 "10"] + LAYOUT,
                                cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT,
                                timeout=60).returncode
                        text = read(log)
                        self.assertGreater(code, 0, f"{address}: {text[-2000:]}")
                        self.assertEqual(text.count("error:"), 1, f"{address}: {text[-2000:]}")
                    for i in range(GOOD_CLIENTS):
                        ok, why = good_client(self.workdir, provider, server, f"{tag}-{i}")
                        self.assertTrue(ok, f"{tag}: good client {i}: {why}")
                    after = rss_kb(server.process.pid)
                    print(f"attack {tag}: every malformed --server refused in one line; "
                          f"{GOOD_CLIENTS}/{GOOD_CLIENTS} good clients verified after; server "
                          f"RSS {before} kB before, {after} kB after", flush=True)
                    self.assertIsNone(server.process.poll(), read(server.log)[-3000:])
                    self.assertLessEqual(after, max(before * 1.2, before + RSS_SLACK_KB))
                finally:
                    server.stop()

    def test_guessed_keys_write_nothing(self):
        """A peer that knows a process's address and region but not its
        key writes nothing into it over tcp: keys start at a random value.
        (shm writes with process_vm_writev and checks no key: any process
        of the same user can write there anyway, so shm is not run.)"""
        if "tcp" not in PROVIDERS:
            self.skipTest("tcp not among ATTACK_PROVIDERS")
        server = Server(self.workdir, "tcp", "tcp-guessed-keys")
        try:
            log = os.path.join(self.workdir, "attacker-guessed-keys.log")
            with open(log, "w") as out:
                code = subprocess.run(
                    [attacker_binary(), "--provider", "tcp", "--server", server.address(),
                     "--mode", "guessed-keys", "--seconds", str(min(SECONDS, 3.0))],
                    cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT,
                    timeout=SECONDS + 60).returncode
            print(f"attack tcp-guessed-keys: {read(log).strip()}", flush=True)
            self.assertEqual(code, 0, read(log))
            self.assertRegex(read(log), r"the bystander \(process \d+\) is untouched")
            self.assertIsNone(server.process.poll(), read(server.log)[-3000:])
        finally:
            server.stop()

    def test_attacks(self):
        for provider in PROVIDERS:
            for mode in MODES:
                if f"{provider}:{mode}" in KNOWN_FAILING:
                    print(f"attack_test: {provider}:{mode} left out (known to fail now and then; "
                          "ATTACK_KNOWN_FAILING= runs it)")
                    continue
                if mode == "spoofed" and provider != "tcp":
                    continue  # shm names a process: the door checks it
                with self.subTest(provider=provider, mode=mode):
                    self.attack(provider, mode)


if __name__ == "__main__":
    unittest.main()
