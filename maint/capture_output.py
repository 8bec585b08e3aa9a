#!/usr/bin/env python3
"""Captures what a short run of each chapter prints, for the pages' "What you should see".

Runs each chapter's real server (--once) and client on this machine, over
`shm` with host memory, 1 group x 2 NICs, a small request (1000 WRITEs of
4 KiB, a fixed seed), and writes both terminals' output into
docs/output/<chapter>.txt, preceded by the command that printed it. What
varies from run to run or machine to machine is replaced by a placeholder
(NORMALISE): the server's address by <address>, times by <time>, speeds by
<rate>, the libfabric version by <version> and the file it was loaded
from by <path>, the host group's NUMA node and
cores by <node> and <cores>. What is left is the same on every machine and
every run, so the pages can show it and a test can compare it:

  bazel build //chapters/... && python3 maint/capture_output.py   # rewrite docs/output/
  python3 maint/capture_output.py --check     # exit 1 naming each chapter that drifted
  python3 maint/docs_diff.py --write          # copy docs/output/ into the pages

maint/docs_diff.py puts docs/output/<chapter>.txt between the page's
`<!-- output:begin <chapter> -->` and `<!-- output:end -->`;
`bazel test //docs:output_check_test` runs this tool's check on the
binaries Bazel built.
"""
import argparse
import difflib
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The request of every capture: small, so that all chapters take seconds.
PROVIDER = ["--provider", "shm", "--memory", "host"]
SERVER_FLAGS = PROVIDER + ["--once", "--repeat", "5"]
CLIENT_FLAGS = PROVIDER + ["--gpus", "1", "--nics-per-gpu", "2", "--page-size", "4096",
                           "--pages", "100", "--seed", "7"]

# (pattern, replacement), applied to every line in this order.
NORMALISE = [
    # the server's address: hex, with the process id inside for shm
    (re.compile(r"\b[0-9a-f]{16,}\b"), "<address>"),
    # the libfabric in use: its version and the file it was loaded from
    (re.compile(r"\blibfabric \d+\.\d+(\.\d+)?\S* \(API \d+\.\d+\)( from [^,]+)?"),
     lambda m: "libfabric <version> (API <version>)" + (" from <path>" if m.group(2) else "")),
    # the topology table's host row: the NUMA node and cores of this machine
    (re.compile(r"^(host\s+-\s+)\S+\s+\S+\s+"), r"\1<node>  <cores>  "),
    (re.compile(r"\[\s*\d+\.\d+s\]"), "[<time>s]"),
    (re.compile(r"\b\d+\.\d+ s\b"), "<time> s"),
    (re.compile(r"\b\d+\.\d+ (Gbps|Mops/s)"), r"<rate> \1"),
    (re.compile(r"\b\d+\.\d+% of\b"), "<share>% of"),
]


def normalise(text):
    """The output with every run-dependent part replaced by its placeholder."""
    out = []
    for line in text.splitlines():
        for pattern, repl in NORMALISE:
            line = pattern.sub(repl, line)
        out.append(line.rstrip())
    return "\n".join(out) + "\n"


class CaptureError(Exception):
    pass


def chapters(root):
    """The chapters of a checkout (server.cc) or of Bazel's runfiles (server)."""
    return sorted(p.name for p in (root / "chapters").iterdir()
                  if (p / "server.cc").exists() or (p / "server").exists())


def binary(bin_dir, chapter, name):
    path = (bin_dir / chapter / name).absolute()
    if not path.exists():
        raise CaptureError(f"{path} not found: bazel build //chapters/... (or pass --bin-dir)")
    return path


def capture(bin_dir, chapter, timeout=60):
    """One short run of a chapter: the transcript, normalised."""
    server_bin, client_bin = binary(bin_dir, chapter, "server"), binary(bin_dir, chapter, "client")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        address = tmp / "address"
        # Files, not pipes: nothing blocks, and each side's lines keep their order.
        with open(tmp / "server.out", "w") as sout:
            server = subprocess.Popen([str(server_bin), *SERVER_FLAGS, "--address-file",
                                       str(address)], stdout=sout, stderr=subprocess.STDOUT,
                                      cwd=tmp)
            try:
                deadline = time.monotonic() + timeout
                while not (address.exists() and address.read_text().strip()):
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise CaptureError(f"{chapter}: the server did not start: "
                                           + (tmp / "server.out").read_text().strip()[-300:])
                    time.sleep(0.05)
                hex_address = address.read_text().strip()
                client = subprocess.run([str(client_bin), "--server", hex_address,
                                         *CLIENT_FLAGS], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, timeout=timeout,
                                        cwd=tmp)
                server.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise CaptureError(f"{chapter}: no result within {timeout} s")
            finally:
                if server.poll() is None:
                    server.kill()
                    server.wait()
        server_out = (tmp / "server.out").read_text()
    if client.returncode != 0 or server.returncode != 0:
        raise CaptureError(f"{chapter}: client exit {client.returncode}, server exit "
                           f"{server.returncode}: {client.stdout.strip()[-300:]}")
    target = f"//chapters/{chapter}"
    return normalise(
        "# the server's terminal\n"
        f"$ bazel run {target}:server -- {' '.join(SERVER_FLAGS)}\n" + server_out +
        "\n# the client's terminal (the command the server printed, with a small request)\n"
        f"$ bazel run {target}:client -- --server {hex_address} {' '.join(CLIENT_FLAGS)}\n"
        + client.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=pathlib.Path, default=ROOT,
                   help="repository root (default: this checkout)")
    p.add_argument("--bin-dir", type=pathlib.Path, default=None,
                   help="folder with <chapter>/server and <chapter>/client "
                        "(default: <root>/bazel-bin/chapters)")
    p.add_argument("--out", type=pathlib.Path, default=None,
                   help="folder of the transcripts (default: <root>/docs/output)")
    p.add_argument("--chapters", nargs="+", default=None, metavar="CHAPTER",
                   help="only these chapters (default: every chapter)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 naming each chapter whose output differs from "
                        "its transcript")
    p.add_argument("--timeout", type=float, default=60, help="seconds for one run (default: 60)")
    args = p.parse_args()
    bin_dir = args.bin_dir or args.root / "bazel-bin" / "chapters"
    out = args.out or args.root / "docs" / "output"
    known = chapters(args.root)
    wanted = args.chapters or known
    unknown = [c for c in wanted if c not in known]
    if unknown:
        print(f"capture_output: no chapter {', '.join(unknown)} (chapters: {', '.join(known)})",
              file=sys.stderr)
        return 2
    drifted = []
    for chapter in wanted:
        try:
            text = capture(bin_dir, chapter, args.timeout)
        except CaptureError as e:
            print(f"capture_output: {e}", file=sys.stderr)
            return 2
        path = out / f"{chapter}.txt"
        old = path.read_text() if path.exists() else None
        if old == text:
            continue
        if args.check:
            drifted.append(chapter)
            diff = difflib.unified_diff((old or "").splitlines(), text.splitlines(),
                                        f"{path} (checked in)", f"{chapter} (this run)",
                                        lineterm="", n=1)
            print("\n".join(list(diff)[:30]))
        else:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"capture_output: wrote {path}")
    if drifted:
        print(f"capture_output: the output of {', '.join(drifted)} differs from {out}; run "
              "`bazel build //chapters/... && python3 maint/capture_output.py`, then "
              "`python3 maint/docs_diff.py --write`, and commit both")
        return 1
    if args.check:
        print(f"capture_output: {len(wanted)} chapter(s) print what {out} says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
