"""A client whose connection to the server hangs opens NIC 0 anew, end to end
over tcp.

Over tcp the provider takes no send until its connection to the server is
up. libfabric 1.17's tcp leaves open a socket it had accepted but not yet
read the request of when its endpoint closes (as the server's front door
does when it is rebuilt after a flood), and nothing times the request out:
the client's CONNECT then waits for ever. Here a relay in front of a real
server stands for that socket: it accepts the client's first connection and
never answers it, and joins every later connection to the server. The
client must give up on the first connection (common/client.cc,
RenewNic0), open NIC 0 anew, and be served. Every wait is bounded.
"""
import os
import pathlib
import select
import socket
import struct
import subprocess
import sys
import threading
import unittest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", ".")) / os.environ.get(
    "TEST_WORKSPACE", "")
sys.path.insert(0, str(RUNFILES / "maint"))
from peer_processes import chapter_binary, read, stop, wait_for, work_folder  # noqa: E402

CHAPTER = "10_warmup"
LAYOUT = ["--provider", "tcp", "--memory", "host", "--buffer-size", "1048576"]
RENEWED_LINE = "NIC 0 opened anew"


def tcp_address(port):
    """The tcp provider's address: a sockaddr_in for 127.0.0.1, in hex."""
    return (struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) +
            socket.inet_aton("127.0.0.1") + bytes(8)).hex()


def address_port(hex_address):
    return struct.unpack(">H", bytes.fromhex(hex_address)[2:4])[0]


class SilentFirstRelay:
    """Listens on a port of its own; holds the first connection open without
    a word (reading what comes), and joins every later one to `target`."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.sockets = [self.listener]
        self.accepted = 0
        self.stopping = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        pairs = {}  # socket -> its partner, or None for the silent one
        while not self.stopping:
            ready, _, _ = select.select(list(pairs) + [self.listener], [], [], 0.1)
            for sock in ready:
                if sock is self.listener:
                    client, _ = self.listener.accept()
                    self.sockets.append(client)
                    self.accepted += 1
                    if self.accepted == 1:
                        pairs[client] = None
                        continue
                    server = socket.create_connection(("127.0.0.1", self.target_port), 5)
                    self.sockets.append(server)
                    pairs[client], pairs[server] = server, client
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                partner = pairs.get(sock)
                if not data:
                    pairs.pop(sock, None)
                    if partner is not None:
                        pairs.pop(partner, None)
                        partner.close()
                    sock.close()
                elif partner is not None:
                    partner.sendall(data)

    def close(self):
        self.stopping = True
        self.thread.join(5)
        for sock in self.sockets:
            sock.close()


class StuckConnectionTest(unittest.TestCase):
    def test_client_renews_a_connection_that_never_comes_up(self):
        workdir = work_folder(self, "stuck_connection_")
        log = os.path.join(workdir, "server.log")
        address_file = os.path.join(workdir, "address")
        with open(log, "w") as out:
            server = subprocess.Popen(
                [chapter_binary(CHAPTER, "server"), "--repeat", "2", "--address-file",
                 address_file] + LAYOUT, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
        self.addCleanup(stop, server)
        self.assertTrue(wait_for(lambda: "Waiting for a client" in read(log), 60), read(log))
        relay = SilentFirstRelay(address_port(read(address_file).strip()))
        self.addCleanup(relay.close)

        client_log = os.path.join(workdir, "client.log")
        with open(client_log, "w") as out:
            code = subprocess.run(
                [chapter_binary(CHAPTER, "client"), "--server", tcp_address(relay.port),
                 "--page-size", "4096", "--pages", "64", "--connect-timeout", "30",
                 "--timeout", "60"] + LAYOUT,
                cwd=workdir, stdout=out, stderr=subprocess.STDOUT, timeout=120).returncode
        text = read(client_log)
        self.assertEqual(code, 0, text[-3000:] + "\nserver:\n" + read(log)[-2000:])
        self.assertIn("every byte correct", text)
        self.assertEqual(text.count(RENEWED_LINE), 1, text[-3000:])
        self.assertGreaterEqual(relay.accepted, 2, "the client never came back")


if __name__ == "__main__":
    unittest.main()
