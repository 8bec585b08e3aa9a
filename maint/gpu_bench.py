#!/usr/bin/env python3
"""Measures every chapter on a GPU machine, with fi_rma_bw as the ceiling.

Runs where Bazel is not: the chapter binaries come from --bin-dir (built
elsewhere against a CUDA toolkit and a CUDA-capable libfabric) and fabtests'
fi_rma_bw from --fabtests. Each measurement is appended as one JSON line to
--out/records.jsonl as soon as it exists, so a run cut short keeps what it
measured. maint/gpu_tables.py turns the records into tables.

  phases:
    env       GPUs, driver, CUDA, CPU, libfabric
    ceiling   fi_rma_bw -o writedata, one pair per endpoint, run concurrently;
              each pair's WRITEs calibrated from a short run to last
              --ceiling-seconds; a failed pair is recorded with its reason
              (timeout, exit code, no result row) and last output lines
    mt        fi_rdm_bw_mt, CUDA memory on the first GPU of each side: that
              GPU's endpoints in one process per side, then one process per
              endpoint (the provider's limit for one process)
    mt-host   the same with host memory and every group's endpoints
    cuda      every chapter, --memory cuda over shm, server and client on
              different GPUs, each page size
    host      every chapter, --memory host over shm, many groups (as on a p5)
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import run_chapter  # noqa: E402

PHASES = ["env", "copy", "split", "ceiling", "mt", "mt-host", "cuda", "ceiling-after", "host"]
CHAPTERS = ["09_multinet", "10_warmup", "11_multithread", "12_pin", "13_shard", "14_batch",
            "15_lazy", "16_thread_domain", "17_op_pool", "18_more"]


def emit(out, record):
    with open(out / "records.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout
    except subprocess.TimeoutExpired:
        return ""


def phase_env(args):
    env = {
        "phase": "env",
        "gpus": sh("nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total "
                   "--format=csv,noheader").strip().splitlines(),
        "topology": sh("nvidia-smi topo -m").strip(),
        "cuda": sh("ls -d /usr/local/cuda-* 2>/dev/null; cat /usr/local/cuda/version.json "
                   "2>/dev/null | head -5").strip(),
        "cpu": sh("lscpu | grep -E 'Model name|^CPU\\(s\\)|NUMA node\\(s\\)|Thread'").strip(),
        "memory": sh("grep MemTotal /proc/meminfo").strip(),
        "kernel": sh("uname -r").strip(),
        "libfabric": sh(f"{args.fabtests}/fi_info --version").strip(),
        # The file fabtests load (the chapters' records name the one they load).
        "libfabric_path": sh(f"ldd {args.fabtests}/fi_rma_bw 2>/dev/null | "
                             "awk '/libfabric/ {print $3}'").strip(),
        "fi_info_shm_hmem": sh(f"{args.fabtests}/fi_info -p shm -c FI_HMEM | head -3").strip(),
        # The providers that library offers on this machine (efa only where
        # an EFA device is).
        "libfabric_providers": sorted(set(re.findall(
            r"^provider: (\S+)", sh(f"{args.fabtests}/fi_info 2>/dev/null"), re.M))),
        # How that libfabric was built: the version string does not say.
        "libfabric_build": args.libfabric_build,
    }
    emit(args.out, env)


ROW = re.compile(r"^\s*(\d+[kmg]?)\s+(\S+)\s+(\S+)\s+(\S+)s\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def listening_ports():
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = pathlib.Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def wait_listening(ports, processes, timeout):
    deadline = time.monotonic() + timeout
    time.sleep(0.5)
    while time.monotonic() < deadline:
        if set(ports) <= listening_ports() or any(p.poll() is not None for p in processes):
            break
        time.sleep(0.1)
    time.sleep(0.2)


def last_lines(text, n=5):
    return [line for line in (text or "").splitlines() if line.strip()][-n:]


def finish(p, deadline):
    """Waits for p until deadline; kills it then. Returns (its output, whether
    it ran out of time). Past the deadline each process still gets a moment to
    be read, not a second each (a batch can have 64 of them)."""
    try:
        out, _ = p.communicate(timeout=max(0.2, deadline - time.monotonic()))
        return out or "", False
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        return out or "", True


def fabtests_pairs(args, tool, extra, size, pairs, sender_devices, receiver_devices, iters,
                   timeout=None):
    """Runs `pairs` pairs of a fabtests benchmark at once, each on its own
    out-of-band port; returns ok, the summed MB/s and Mops/s, errors (one line
    per failed process), each pair's seconds, each pair's usec per transfer
    (fabtests' usec/xfer) and failures (per failed process: pair, role,
    reason, exit code, last output lines). `iters` is one count for every
    pair or a list with one per pair. The fabtests server (no address)
    receives the data; *_devices pick each pair's CUDA device (None: host
    memory)."""
    iters = list(iters) if isinstance(iters, (list, tuple)) else [iters] * pairs
    timeout = args.ceiling_timeout if timeout is None else timeout
    # fabtests prints through stdio, fully buffered into a pipe: line-buffer
    # it so that a pair killed at the deadline still shows its last lines.
    stdbuf = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []

    def base(k):
        return stdbuf + [f"{args.fabtests}/{tool}", "-p", "shm", "-S", str(size), "-I",
                         str(iters[k])] + extra

    def device(devices, k):
        return ["-D", "cuda", "-i", str(devices[k % len(devices)])] if devices else []

    servers = [subprocess.Popen(base(k) + [f"-E={args.oob_port + k}"] + device(receiver_devices, k),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for k in range(pairs)]
    # fabtests' out-of-band socket: a client that connects before its server
    # listens fails with "Connection refused" (8 servers starting CUDA at once
    # can take longer than a fixed sleep).
    wait_listening([args.oob_port + k for k in range(pairs)], servers, timeout=30)
    clients = [subprocess.Popen(base(k) + [f"-E={args.oob_port + k}"] + device(sender_devices, k) +
                                ["127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
               for k in range(pairs)]
    mbps = mops = 0.0
    seconds, usec, failures = [], [], []
    # One deadline for the whole batch: waiting on each process in turn with
    # its own timeout once let a hung pair hold the machine for many minutes.
    deadline = time.monotonic() + timeout
    roles = [(k, "client", p) for k, p in enumerate(clients)] + \
            [(k, "server", p) for k, p in enumerate(servers)]
    for k, role, p in roles:
        out, timed_out = finish(p, deadline)
        reason = None
        if timed_out:
            reason = f"timed out after {timeout:g} s (the batch's --ceiling-timeout)"
        elif p.returncode != 0:
            reason = f"exit code {p.returncode}"
        if role == "client" and reason is None:
            rows = [r for r in map(ROW.match, out.splitlines()) if r]
            if rows:
                mbps += float(rows[-1].group(5))  # fabtests' MB is 10^6 bytes
                mops += float(rows[-1].group(5)) / size
                seconds.append(float(rows[-1].group(4)))
                usec.append(float(rows[-1].group(6)))
            else:
                reason = "no result row in its output"
        if reason is not None:
            failures.append({"pair": k, "role": role, "reason": reason,
                             "exit_code": None if timed_out else p.returncode,
                             "iters": iters[k], "last_lines": last_lines(out)})
            print(f"gpu_bench: {tool} pair {k} {role}: {reason}\n" + out[-2000:], flush=True)
    errors = [f"pair {f['pair']} {f['role']}: {f['reason']}"
              + (f"; last output: {' | '.join(f['last_lines'])}" if f["last_lines"] else
                 "; no output")
              for f in failures]
    return not failures, mbps, mops, errors, seconds, usec, failures


def rma_bw_pairs(args, size, pairs, cuda, iters, timeout=None):
    """fi_rma_bw, one pair per endpoint: the issue's ceiling. For a WRITE the
    fabtests server is the target, so it sits on the client's device."""
    return fabtests_pairs(args, "fi_rma_bw", ["-W", "64", "-o", "writedata"], size, pairs,
                          args.server_devices if cuda else None,
                          args.client_devices if cuda else None, iters, timeout)


def calibrated_iters(args, usec):
    """WRITEs for each pair to run about --ceiling-seconds, from the pair's
    time per WRITE in the short run; at least --calibrate-iters, at most
    --iters-max."""
    return [max(args.calibrate_iters,
                min(args.iters_max, round(args.ceiling_seconds * 1e6 / max(u, 1e-3))))
            for u in usec]


def phase_ceiling(args, memory, sizes, pairs):
    tool = "fi_rma_bw -o writedata -W 64"
    for size in sizes:
        calibration = None
        if args.calibrate_iters > 0:
            # A short run of all the pairs at once (as they will run) gives each
            # pair's time per WRITE under that load: four pairs sharing one
            # GPU took 30 times as long per WRITE as one pair alone.
            ok, _, _, errors, _, usec, failures = rma_bw_pairs(
                args, size, pairs, memory == "cuda", args.calibrate_iters)
            calibration = {"iters": args.calibrate_iters, "ok": ok, "usec_per_write": usec,
                           "target_seconds": args.ceiling_seconds}
            if not ok:
                emit(args.out, {"phase": "ceiling", "tool": tool, "provider": "shm",
                                "memory": memory, "page_size": size, "pairs": pairs,
                                "ok": False, "gbps": 0, "mops": 0, "iters": [],
                                "pair_seconds": [], "gbps_lower_bound": 0,
                                "calibration": calibration, "errors": errors,
                                "failures": failures,
                                "failed_in": "calibration"})
                continue
            iters = calibrated_iters(args, usec)
        else:
            iters = [args.iters_small if size < 1 << 20 else args.iters_large] * pairs
        ok, mbps, mops, errors, seconds, _, failures = rma_bw_pairs(
            args, size, pairs, memory == "cuda", iters)
        # The pairs start one after another (each initialises CUDA and
        # connects first), so the sum of their rates is the aggregate only
        # where they overlap: runs must be long against that skew. all bytes
        # over the longest pair's time is a lower bound; near the sum when the
        # pairs overlapped, far below it when they ran one after another.
        record = {"phase": "ceiling", "tool": tool, "provider": "shm",
                  "memory": memory, "page_size": size, "pairs": pairs, "ok": ok,
                  "gbps": mbps * 8 / 1000, "mops": mops, "iters": iters,
                  "pair_seconds": seconds,
                  "gbps_lower_bound": sum(iters) * size * 8 / max(seconds) / 1e9
                  if ok and seconds else 0,
                  "errors": errors, "failures": failures}
        if calibration:
            record["calibration"] = calibration
        emit(args.out, record)


def phase_mt(args, memory, sizes, endpoints, iters):
    """The provider alone, one process against many: fabtests' fi_rdm_bw_mt
    (one endpoint and domain per thread, one send in flight per thread) with
    all endpoints in one process per side, then with one process per
    endpoint. No tutorial code runs, so a gap between the two is the
    provider's (or CUDA's) own limit for one process."""
    cuda = memory == "cuda"
    for size in sizes:
        for procs, threads in ((1, endpoints), (endpoints, 1)):
            ok, mbps, mops, errors, seconds, _, _ = fabtests_pairs(
                args, "fi_rdm_bw_mt", ["-n", str(threads)], size, procs,
                args.server_devices[:1] if cuda else None,
                args.client_devices[:1] if cuda else None, iters)
            emit(args.out, {"phase": "mt", "tool": "fi_rdm_bw_mt", "provider": "shm",
                            "memory": memory, "page_size": size, "processes": procs,
                            "endpoints_per_process": threads, "ok": ok,
                            "gbps": mbps * 8 / 1000, "mops": mops, "iters": iters,
                            "pair_seconds": seconds, "errors": errors})


def phase_copy(args, sizes):
    """Times the CUDA work shm does per WRITE (maint/probes/cuda_copy_probe):
    the target's copy and the initiator's IPC handle lookup, each from one
    process with one thread, one process with a thread per endpoint, and one
    process per endpoint (as the fi_rma_bw pairs are)."""
    probe = args.bin_dir / "probes" / "cuda_copy_probe"
    src, dst, n = args.server_devices[0], args.client_devices[0], args.nics_per_gpu
    runs = [(mode, size, procs, threads) for mode in args.copy_modes for size in sizes
            for procs, threads in ((1, 1), (1, n), (n, 1))]
    for mode, size, procs, threads in runs:
        cmd = [str(probe), "--mode", mode, "--src-device", str(src), "--dst-device", str(dst),
               "--size", str(size), "--threads", str(threads), "--copies",
               "50000" if mode == "copy" else "1000000", "--max-seconds", "3"]
        ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(procs)]
        outs, ok = [], True
        for p in ps:
            try:
                out, _ = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                out, ok = p.communicate()[0], False
            try:
                outs.append(json.loads(out.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                ok = False
                print(out[-1000:], flush=True)
        emit(args.out, {"phase": "copy", "tool": "cuda_copy_probe", "mode": mode,
                        "src_device": src, "dst_device": dst, "page_size": size,
                        "processes": procs,
                        "threads": threads, "ok": ok,
                        "gbps": sum(o["gbps"] for o in outs),
                        "mops": sum(o["mops"] for o in outs), "command": " ".join(cmd)})


def phase_split(args, sizes):
    """The same endpoints, split over K server/client process pairs that run at
    once (K = 1, 2, ... up to one pair per endpoint), for the last chapter:
    tells a limit of one process apart from a limit of our code."""
    chapter = args.chapters[-1]
    n = args.nics_per_gpu
    for size in sizes:
        for k in (k for k in range(1, n + 1) if n % k == 0):
            for i in range(args.runs):
                ns = chapter_args(args, args.split_memory, size, 1, n // k)
                ns.repeat = max(1, ns.repeat // k)  # the same bytes in all
                results, errors = [], []

                def one():
                    try:
                        results.append(run_chapter.run_once(ns, chapter, echo=False))
                    except Exception as e:  # recorded below
                        errors.append(str(e)[-500:])

                threads = [threading.Thread(target=one) for _ in range(k)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                ok = not errors and len(results) == k
                seconds = max((r["seconds"] for r in results), default=0)
                total = sum(r["bytes"] for r in results)
                emit(args.out, {"phase": "split", "chapter": chapter, "page_size": size,
                                "memory": args.split_memory,
                                "processes_per_side": k, "nics_per_process": n // k, "ok": ok,
                                "gbps": total * 8 / seconds / 1e9 if ok and seconds else 0,
                                "mops": sum(r["ops"] for r in results) / seconds / 1e6
                                if ok and seconds else 0,
                                "pair_gbps": [r["gbps"] for r in results],
                                "errors": errors, "command": results[0]["command"] if results else ""})


def chapter_args(args, memory, size, gpus, nics):
    ns = argparse.Namespace()
    total = min(args.max_bytes_per_run, size * args.ops_per_run)
    pages = max(1, min(1000, (args.buffer_bytes // size)))
    repeat = max(1, total // (size * pages * 2 * gpus))
    ns.provider, ns.memory, ns.gpus, ns.nics_per_gpu = "shm", memory, gpus, nics
    ns.page_size, ns.pages, ns.repeat = size, pages, repeat
    ns.buffer_size = None
    ns.bin_dir, ns.no_build, ns.timeout = args.bin_dir, True, args.run_timeout
    ns.server_env, ns.client_env = [], []
    if memory == "cuda":
        ns.server_arg = ["--cuda-devices=" + ",".join(map(str, args.server_devices))]
        ns.client_arg = ["--cuda-devices=" + ",".join(map(str, args.client_devices))]
    else:
        ns.server_arg, ns.client_arg = [], []
    return ns


def phase_chapters(args, phase, memory, sizes, gpus, nics, deadline):
    for size in sizes:
        for chapter, poll in ((c, m) for c in args.chapters for m in args.poll_threads):
            runs = []
            for i in range(args.runs):
                if time.monotonic() > deadline:
                    print(f"gpu_bench: time budget spent, stopping {phase}", flush=True)
                    return
                ns = chapter_args(args, memory, size, gpus, nics)
                ns.client_arg = ns.client_arg + ["--poll-threads", poll]
                try:
                    record = run_chapter.run_once(ns, chapter, echo=False)
                    runs.append(record)
                except Exception as e:  # a failed run is recorded, not fatal
                    emit(args.out, {"phase": phase, "chapter": chapter, "page_size": size,
                                    "poll_threads": poll, "ok": False, "error": str(e)[-500:]})
            if runs:
                best = sorted(runs, key=lambda r: r["gbps"])[len(runs) // 2]
                emit(args.out, {"phase": phase, "chapter": chapter, "memory": memory,
                                "provider": "shm", "page_size": size, "gpus": gpus,
                                "nics_per_gpu": nics, "poll_threads": poll,
                                "runs": len(runs), "ok": True,
                                "gbps": statistics.median(r["gbps"] for r in runs),
                                "mops": statistics.median(r["mops"] for r in runs),
                                "all_gbps": [r["gbps"] for r in runs],
                                "command": best["command"], "libfabric": best["libfabric"],
                                "libfabric_version": best.get("libfabric_version", ""),
                                "libfabric_path": best.get("libfabric_path", ""),
                                # What the server says its memory was: "cuda-emulated"
                                # where efa emulated the WRITEs (never a GPU number),
                                # and whether the NIC's RDMA was in use (null: not efa).
                                "memory_label": best.get("memory", memory),
                                "device_rdma": best.get("device_rdma"),
                                "emulated_write": best.get("emulated_write"),
                                "pages": best["pages"], "repeat": best["repeat"]})


def smoke(args):
    """One small CUDA run first: a broken CUDA path must not eat the budget."""
    ns = chapter_args(args, "cuda", 65536, len(args.server_devices), 1)
    ns.repeat, ns.pages, ns.timeout = 2, 16, 20
    try:
        record = run_chapter.run_once(ns, "10_warmup", echo=True)
        emit(args.out, {"phase": "smoke", "ok": True, "gbps": record["gbps"]})
        return True
    except Exception as e:
        emit(args.out, {"phase": "smoke", "ok": False, "error": str(e)[-3000:]})
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", type=pathlib.Path, required=True,
                   help="chapter binaries, <dir>/<chapter>/{server,client} "
                        "(maint/build_gpu_binaries.sh)")
    p.add_argument("--fabtests", type=pathlib.Path, required=True, help="folder with fi_rma_bw")
    p.add_argument("--out", type=pathlib.Path, required=True,
                   help="folder for records.jsonl (appended to, one JSON line per measurement)")
    p.add_argument("--phases", default="env,ceiling,cuda,host",
                   help=f"comma-separated, of: {', '.join(PHASES)} (see the top of this file)")
    p.add_argument("--server-devices", default="0",
                   help="CUDA devices of the server, one group each (e.g. 0,1)")
    p.add_argument("--client-devices", default="1", help="CUDA devices of the client")
    p.add_argument("--nics-per-gpu", type=int, default=4,
                   help="endpoints per GPU group (shm: as many as asked)")
    p.add_argument("--sizes", default="4096,65536,1048576", help="page sizes of the CUDA phases")
    p.add_argument("--runs", type=int, default=3, help="runs per chapter (the median is kept)")
    # A chapter's time includes the request's setup, which fi_rma_bw leaves
    # out; runs of seconds (as the ceiling's are) keep that cost small.
    p.add_argument("--ops-per-run", type=int, default=1000000, help="WRITEs per chapter run")
    p.add_argument("--max-bytes-per-run", type=int, default=512 << 30,
                   help="caps --ops-per-run at large pages")
    p.add_argument("--buffer-bytes", type=int, default=256 << 20,
                   help="bytes per client buffer (pages per buffer: this / page size, at most 1000)")
    # fi_rma_bw WRITEs per pair: enough for seconds of overlap between pairs
    # (5000 at 1 MiB lasted about 70 ms, shorter than the pairs' start skew),
    # but a fixed count can take minutes where the pairs share a GPU: the
    # count comes from a short run of the same pairs.
    p.add_argument("--ceiling-seconds", type=float, default=5,
                   help="how long each fi_rma_bw pair of the ceiling should run; its WRITEs "
                        "are calibrated from a short run of all pairs at once (default 5)")
    p.add_argument("--calibrate-iters", type=int, default=2000,
                   help="fi_rma_bw WRITEs per pair of the short calibration run, and the "
                        "fewest of the real one; 0: no calibration, --iters-small and "
                        "--iters-large as given (default 2000)")
    p.add_argument("--iters-max", type=int, default=2000000,
                   help="the most fi_rma_bw WRITEs a calibrated pair gets (default 2000000)")
    p.add_argument("--iters-small", type=int, default=300000,
                   help="with --calibrate-iters 0: fi_rma_bw WRITEs per pair below 1 MiB")
    p.add_argument("--iters-large", type=int, default=150000,
                   help="with --calibrate-iters 0: fi_rma_bw WRITEs per pair at 1 MiB and up")
    p.add_argument("--iters-mt", type=int, default=20000, help="sends per thread, phase mt")
    p.add_argument("--iters-mt-host", type=int, default=50000, help="sends per thread, mt-host")
    p.add_argument("--host-gpus", type=int, default=8, help="groups of the host phase (a p5: 8)")
    p.add_argument("--host-nics", type=int, default=4,
                   help="endpoints per group of the host phase (a p5: 4)")
    p.add_argument("--host-sizes", default="65536", help="page sizes of the host phases")
    p.add_argument("--budget", type=float, default=500,
                   help="seconds from the start after which no further chapter run starts")
    p.add_argument("--ceiling-timeout", type=float, default=60,
                   help="seconds for one batch of concurrent fi_rma_bw pairs (the calibration "
                        "run and the real one each; at least twice --ceiling-seconds)")
    p.add_argument("--run-timeout", type=float, default=60, help="seconds for one chapter run")
    p.add_argument("--oob-port", type=int, default=9300,
                   help="fabtests' out-of-band TCP port of the first pair (-E); pair k uses "
                        "this + k (default 9300)")
    p.add_argument("--split-memory", default="cuda", help="memory kind of the split phase")
    p.add_argument("--copy-modes", default="copy,ipc-handle",
                   help="cuda_copy_probe --mode values of the copy phase, comma-separated")
    p.add_argument("--libfabric-build", default="--with-cuda",
                   help="how the libfabric in use was built, recorded in the env record")
    p.add_argument("--chapters", default=",".join(CHAPTERS), help="which chapters to run")
    p.add_argument("--poll-threads", default="gpu",
                   help="client --poll-threads values to run, comma-separated: gpu, nic")
    args = p.parse_args()
    args.chapters = args.chapters.split(",")
    args.poll_threads = args.poll_threads.split(",")
    wanted = set(args.phases.split(","))
    if args.calibrate_iters < 0 or args.iters_max < max(1, args.calibrate_iters):
        p.error("--calibrate-iters: 0 or more, and no more than --iters-max")
    if args.ceiling_seconds <= 0 or args.ceiling_timeout < 2 * args.ceiling_seconds:
        p.error("--ceiling-seconds: more than 0, and --ceiling-timeout at least twice it")
    unknown = wanted - set(PHASES)
    if unknown:
        p.error(f"--phases: unknown {', '.join(sorted(unknown))} (known: {', '.join(PHASES)})")
    if set(args.poll_threads) - {"gpu", "nic"}:
        p.error("--poll-threads: gpu, nic or both")
    if set(args.chapters) - set(CHAPTERS):
        p.error(f"--chapters: unknown {', '.join(sorted(set(args.chapters) - set(CHAPTERS)))}")
    tools = {"ceiling": "fi_rma_bw", "ceiling-after": "fi_rma_bw", "mt": "fi_rdm_bw_mt",
             "mt-host": "fi_rdm_bw_mt"}
    for tool in sorted({tools[ph] for ph in wanted & set(tools)}):
        if not os.access(args.fabtests / tool, os.X_OK):
            p.error(f"--fabtests: no {tool} in {args.fabtests}")
    if wanted & {"cuda", "host", "split"}:
        for chapter in args.chapters:
            for program in ("server", "client"):
                if not os.access(args.bin_dir / chapter / program, os.X_OK):
                    p.error(f"--bin-dir: no {chapter}/{program} in {args.bin_dir} "
                            "(maint/build_gpu_binaries.sh makes them)")
    if "copy" in wanted and not os.access(args.bin_dir / "probes" / "cuda_copy_probe", os.X_OK):
        p.error(f"--bin-dir: no probes/cuda_copy_probe in {args.bin_dir}")
    args.copy_modes = args.copy_modes.split(",")
    try:
        args.server_devices = [int(x) for x in args.server_devices.split(",")]
        args.client_devices = [int(x) for x in args.client_devices.split(",")]
    except ValueError:
        p.error("--server-devices, --client-devices: comma-separated CUDA device numbers")
    if len(args.server_devices) != len(args.client_devices):
        # One group per device on each side: the two sides must agree.
        p.error("--server-devices and --client-devices: as many devices on each side "
                "(the same device on both is fine: --server-devices 0 --client-devices 0)")
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget
    sizes = [int(x) for x in args.sizes.split(",")]
    gpus = len(args.server_devices)
    phases = args.phases.split(",")
    if "env" in phases:
        phase_env(args)
    if "copy" in phases:
        phase_copy(args, sizes)
    if "split" in phases:
        phase_split(args, sizes)
    if "ceiling" in phases:
        phase_ceiling(args, "cuda", sizes, gpus * args.nics_per_gpu)
        if "host" in phases:
            phase_ceiling(args, "host", [int(x) for x in args.host_sizes.split(",")],
                          args.host_gpus * args.host_nics)
    if "mt" in phases:
        phase_mt(args, "cuda", sizes, args.nics_per_gpu, args.iters_mt)
    if "mt-host" in phases:
        phase_mt(args, "host", [int(x) for x in args.host_sizes.split(",")],
                 args.host_gpus * args.host_nics, args.iters_mt_host)
    if "cuda" in phases and not smoke(args):
        phases.remove("cuda")
    if "cuda" in phases:
        phase_chapters(args, "cuda", "cuda", sizes, gpus, args.nics_per_gpu, deadline)
    if "ceiling-after" in phases:
        phase_ceiling(args, "cuda", sizes, gpus * args.nics_per_gpu)
    if "host" in phases:
        phase_chapters(args, "host", "host", [int(x) for x in args.host_sizes.split(",")],
                       args.host_gpus, args.host_nics, deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
