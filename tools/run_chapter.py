#!/usr/bin/env python3
"""Runs one chapter's server and client on this machine and prints the result.

A benchmark, not a test: it starts the real server (--once) and client over a
local provider, streams the server's progress, checks that the client
verified every byte, and prints the server's JSON result line.

  tools/run_chapter.py 10_warmup --provider shm
  tools/run_chapter.py 14_batch --provider tcp --gpus 2 --nics-per-gpu 2 --repeat 100
  tools/run_chapter.py 14_batch --provider simnic --page-size 256 --counters

--counters adds the writer threads' counters per WRITE after the JSON line
(docs/README.md, "Counters", says what each one counts).

Binaries come from Bazel (built first unless --no-build) or from --bin-dir,
a folder with <chapter>/server and <chapter>/client (for machines without
Bazel, such as the GPU machines).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def chapters():
    return sorted(p.name for p in (ROOT / "chapters").iterdir() if (p / "BUILD.bazel").exists())


def add_run_flags(parser):
    """Flags shared with tools/compare.py."""
    parser.add_argument("--provider", default="shm",
                        choices=["shm", "tcp", "efa", "simnic", "auto"],
                        help="libfabric provider of both sides; simnic: the simulated EFA-like "
                        "NIC, docs/simnic.md (default: %(default)s)")
    parser.add_argument("--memory", default="host", choices=["host", "cuda", "auto"],
                        help="where both sides' buffers live (default: %(default)s)")
    parser.add_argument("--gpus", type=int, default=1,
                        help="GPU groups per side (default: %(default)s)")
    parser.add_argument("--nics-per-gpu", type=int, default=2,
                        help="endpoints per group (default: %(default)s)")
    parser.add_argument("--page-size", type=int, default=65536,
                        help="bytes per WRITE (default: %(default)s)")
    parser.add_argument("--pages", type=int, default=1000,
                        help="pages per client buffer (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=50,
                        help="times the server writes every page (default: %(default)s)")
    parser.add_argument("--buffer-size", type=int, default=None,
                        help="bytes per buffer (default: just enough for the pages)")
    parser.add_argument("--bin-dir", type=pathlib.Path, default=None,
                        help="folder with <chapter>/server and <chapter>/client (skips Bazel)")
    parser.add_argument("--no-build", action="store_true", help="use bazel-bin as it is")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for one run")
    parser.add_argument("--server-env", action="append", default=[],
                        help="NAME=VALUE for the server only (e.g. CUDA_VISIBLE_DEVICES=0)")
    parser.add_argument("--client-env", action="append", default=[],
                        help="NAME=VALUE for the client only")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="an extra flag for the server only (e.g. --server-arg=--cuda-devices=0)")
    parser.add_argument("--client-arg", action="append", default=[],
                        help="an extra flag for the client only (e.g. --client-arg=--cuda-devices=1)")


def build(chapter_list):
    targets = [f"//chapters/{c}:{b}" for c in chapter_list for b in ("server", "client")]
    subprocess.run(["bazel", "build", *targets, "//simnic:libsimnic-fi.so"], cwd=ROOT, check=True)


def simnic_env(args):
    """What --provider simnic needs: libfabric loads the simulated NIC from
    FI_PROVIDER_PATH, and one simulated NIC per endpoint of the layout keeps
    each group's NICs on its virtual NUMA node (docs/simnic.md)."""
    if args.provider != "simnic":
        return {}
    candidates = [ROOT / "bazel-bin" / "simnic"]
    if args.bin_dir:
        candidates.insert(0, pathlib.Path(args.bin_dir) / "simnic")
    env = {"SIMNIC_NICS": os.environ.get("SIMNIC_NICS", str(args.gpus * args.nics_per_gpu))}
    if not os.environ.get("FI_PROVIDER_PATH"):
        found = [c for c in candidates if (c / "libsimnic-fi.so").exists()]
        if not found:
            sys.exit("run_chapter: libsimnic-fi.so not found in " +
                     ", ".join(str(c) for c in candidates) + " (bazel build //simnic/...)")
        env["FI_PROVIDER_PATH"] = str(found[0].resolve())
    return env


def binary(args, chapter, name):
    base = args.bin_dir if args.bin_dir else ROOT / "bazel-bin" / "chapters"
    path = pathlib.Path(base) / chapter / name
    if not path.exists():
        sys.exit(f"run_chapter: {path} not found (build it, or pass --bin-dir)")
    return str(path)


def env_with(pairs, extra=None):
    env = dict(os.environ, **(extra or {}))
    for pair in pairs:
        name, _, value = pair.partition("=")
        env[name] = value
    return env


def run_once(args, chapter, echo=True):
    """Runs one transfer; returns the server's result record (a dict)."""
    buffer_size = args.buffer_size or max(args.page_size * args.pages, 4096)
    layout = ["--provider", args.provider, "--memory", args.memory, "--gpus", str(args.gpus),
              "--nics-per-gpu", str(args.nics_per_gpu), "--buffer-size", str(buffer_size)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        server_cmd = [binary(args, chapter, "server"), "--once", "--repeat", str(args.repeat),
                      "--address-file", str(tmp / "address"), "--result-json",
                      str(tmp / "server.json"), *layout, *getattr(args, "server_arg", [])]
        server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env_with(args.server_env, simnic_env(args)))
        try:
            deadline = time.monotonic() + 60
            while not (tmp / "address").exists() or not (tmp / "address").read_text().strip():
                if server.poll() is not None or time.monotonic() > deadline:
                    out = server.stdout.read() if server.stdout else ""
                    raise RuntimeError(f"{chapter} server did not start:\n{out}")
                time.sleep(0.05)
            address = (tmp / "address").read_text().strip()
            client_cmd = [binary(args, chapter, "client"), "--server", address, "--page-size",
                          str(args.page_size), "--pages", str(args.pages), "--timeout",
                          str(args.timeout), "--result-json", str(tmp / "client.json"), *layout,
                          *getattr(args, "client_arg", [])]
            client = subprocess.Popen(client_cmd, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      env=env_with(args.client_env, simnic_env(args)))
            # Both sides' lines are read by threads so that a hung run is
            # still bounded by the timeout below.
            server_lines, client_lines = [], []

            def pump(stream, lines, prefix):
                for line in stream:
                    lines.append(line)
                    if prefix:
                        print(f"  {prefix}| {line.rstrip()}", flush=True)

            pumpers = [threading.Thread(target=pump, daemon=True,
                                        args=(server.stdout, server_lines,
                                              "server" if echo else None)),
                       threading.Thread(target=pump, daemon=True,
                                        args=(client.stdout, client_lines, None))]
            for pumper in pumpers:
                pumper.start()
            # Waiting on both reaps a server that ends first (a transfer it
            # abandoned, with --once), so the client sees it gone within a
            # second instead of waiting for its timeout beside a zombie.
            deadline = time.monotonic() + args.timeout + 30
            server_failed_at = None
            while client.poll() is None or server.poll() is None:
                now = time.monotonic()
                if server.poll() not in (None, 0):
                    server_failed_at = server_failed_at or now
                    if now - server_failed_at > 5:
                        break  # the client did not notice; it is stopped below
                if now > deadline:
                    raise RuntimeError(f"{chapter}: no result within {args.timeout + 30:.0f} s:\n"
                                       + "".join(server_lines[-20:]))
                time.sleep(0.05)
            for pumper in pumpers:
                pumper.join(timeout=5)
            client_out = "".join(client_lines)
            if echo:
                for line in client_out.splitlines()[-2:]:
                    print(f"  client| {line}", flush=True)
            if server.returncode != 0:
                raise RuntimeError(f"{chapter} server failed ({server.returncode}):\n"
                                   + "".join(server_lines[-20:])
                                   + "".join(f"client: {line}" for line in client_lines[-2:]))
            if client.returncode != 0:
                raise RuntimeError(f"{chapter} client failed ({client.returncode}):\n{client_out}"
                                   + "".join(server_lines[-10:]))
            record = json.loads((tmp / "server.json").read_text().splitlines()[-1])
            record["command"] = " ".join(["server", *server_cmd[1:]])
            return record
        finally:
            for p in (server, locals().get("client")):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()


# The server record's counters shown by --counters: (key, divided by the
# record's `writes`?).
COUNTERS = [("post_calls", True), ("doorbells", True), ("eagain", True), ("cq_reads", True),
            ("cq_empty_reads", True), ("cq_entries", True), ("op_allocations", True),
            ("ns_per_write_provider", False), ("ns_per_write_app", False),
            ("longest_write_run", False), ("migrations", False), ("involuntary_switches", False)]


def counters_text(record):
    """The record's counters, per WRITE where that is what teaches, one a line."""
    writes = record.get("writes") or 0
    lines = [f"{record.get('chapter', '')}: {writes} WRITE(s), {record.get('mops', 0):.4f} Mops/s, "
             f"{record.get('gbps', 0):.3f} Gbps, threading {record.get('threading', '?')}, "
             f"op_pool {record.get('op_pool', '?')}, doorbell_batching "
             f"{record.get('doorbell_batching', '?')}"]
    for key, per_write in COUNTERS:
        if key not in record:
            continue  # built with -DTUTORIAL_NO_COUNTERS
        value = record[key]
        if per_write:
            shown = f"{value / writes:.3f} per WRITE" if writes else "-"
            lines.append(f"  {key:<22} {shown:>18}   ({value} in all)")
        else:
            lines.append(f"  {key:<22} {value:>18.1f}" if isinstance(value, float)
                         else f"  {key:<22} {value:>18}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapter", choices=chapters())
    add_run_flags(parser)
    parser.add_argument("--counters", action="store_true",
                        help="after the JSON line, the writer threads' counters, per WRITE")
    args = parser.parse_args()
    if not args.bin_dir and not args.no_build:
        build([args.chapter])
    try:
        record = run_once(args, args.chapter)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"run_chapter: error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(record))
    if args.counters:
        print(counters_text(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
