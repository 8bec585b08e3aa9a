"""What the dying-peers tests and maint/dying_peers_rounds.py share about
the processes they start and watch: where a chapter's binaries are, reading
a log that may not exist yet, waiting with a deadline, and a work folder
that goes away with the test."""
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

# Bazel's runfiles when run as a test; the workspace when run by hand.
RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", ".")) / os.environ.get(
    "TEST_WORKSPACE", "")


def chapter_binary(chapter, name):
    """A chapter's server or client: from the test's data, else bazel-bin."""
    path = RUNFILES / "chapters" / chapter / name
    if not path.exists():  # run by hand from the workspace
        path = (pathlib.Path("bazel-bin/chapters") / chapter / name).resolve()
    return str(path)


def read(path):
    """A file's text so far; empty while the process has not written it."""
    try:
        return pathlib.Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""


def wait_for(predicate, seconds, step=0.05):
    """True once predicate() holds; its last answer after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def work_folder(test, prefix):
    """A new folder for `test`'s logs and address files, removed when the
    test ends (its messages carry the logs' tails). Under Bazel it lies in
    the test's own $TEST_TMPDIR, never in /tmp, so clones can test at once."""
    path = tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("TEST_TMPDIR"))
    test.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


def stop(process, seconds=30):
    """SIGINT, then SIGKILL if it has not ended after `seconds`; its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def tcp_ports(pid, state="0A"):
    """The local ports of process `pid`'s IPv4 tcp sockets in `state`
    (/proc/net/tcp: 0A listening, 01 established), one entry per socket;
    none once the process is gone."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = []
    for line in read("/proc/net/tcp").splitlines()[1:]:
        fields = line.split()
        if fields[3] == state and fields[9] in inodes:
            ports.append(int(fields[1].split(":")[1], 16))
    return ports


def lsan_options_with(suppressions):
    """LSAN_OPTIONS of this process plus a suppressions file (libfabric's own
    leaks, tests/lsan_libfabric.supp), for processes run under ASan."""
    return ":".join(o for o in (os.environ.get("LSAN_OPTIONS", ""),
                                f"suppressions={suppressions}") if o)
