#!/usr/bin/env python3
"""Runs one chapter's server and client on this machine and prints the result.

A benchmark, not a test: it starts the real server (--once) and client over a
local provider, streams the server's progress, checks that the client
verified every byte, and prints the server's JSON result line.

  tools/run_chapter.py 10_warmup --provider shm
  tools/run_chapter.py 14_batch --provider tcp --gpus 2 --nics-per-gpu 2 --repeat 100
  tools/run_chapter.py 14_batch --provider simnic --counters

Over simnic the defaults fit the machine: 256-byte pages (a 64 KiB page of
the p5, scaled), the largest layout up to 8 GPUs x 4 NICs whose busy threads
(writers and engine threads) fit the CPUs this process may use (printed),
one client poller thread that backs off when idle, and engine threads kept
off the writers' cores. A run whose writers were preempted or whose engine
fell behind the line rate is flagged ("flags" in the JSON line) and does not
count in tools/compare.py's medians.

It prints the server's JSON result line, or with --counters the writer
threads' counters per WRITE instead (docs/counters.md says what
each one counts; --json adds the line back).

--atomic-census runs the chapter's census build instead
(:server_atomic_census, harness/atomic_census.cc): the counters gain the
atomic read-modify-writes and stores of its server.cc per WRITE, and how
many of them wrote an atomic another thread wrote last (chapter 13's
shared counters gone). Its rate is not the chapter's: every atomic
operation is slowed by the count.

  tools/run_chapter.py 13_shard --provider shm --gpus 2 --nics-per-gpu 1 \
      --atomic-census --counters

The processes' ids are printed as they start ("run_chapter: server pid N",
"run_chapter: client pid N") and, with --pid-dir DIR, written to
DIR/server.pid and DIR/client.pid: an exercise that watches or stops the
run uses them (`ps -T -p "$(cat DIR/server.pid)"`), never a name that
another user's run on a shared machine could match too.

On failure it prints one short error: what failed and the failing side's
last line (the server's lines were shown as they came).

Binaries come from Bazel (built first unless --no-build) or from --bin-dir,
a folder with <chapter>/server and <chapter>/client (for machines without
Bazel, such as the GPU machines).
"""
import argparse
import json
import os
import pathlib
import re
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
    parser.add_argument("--gpus", type=int, default=None,
                        help="GPU groups per side (default: 1; simnic: the largest layout that "
                        "fits this machine's CPUs, up to 8)")
    parser.add_argument("--nics-per-gpu", type=int, default=None,
                        help="endpoints per group (default: 2; simnic: 4)")
    parser.add_argument("--page-size", type=int, default=None,
                        help="bytes per WRITE (default: 65536; simnic: 256, the p5's 64 KiB "
                        "scaled by SIMNIC_SCALE)")
    parser.add_argument("--pages", type=int, default=DEFAULT_PAGES,
                        help="pages per client buffer (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT,
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
    parser.add_argument("--pid-dir", type=pathlib.Path, default=None,
                        help="write server.pid and client.pid into this folder as they start")


# --- simnic's machine-sized defaults ----------------------------------------

DEFAULT_PAGES = 1000           # the series' request: pages per client buffer
DEFAULT_REPEAT = 50            # times the server writes every page
SIMNIC_PAGE_SIZE = 256          # 64 KiB / SIMNIC_SCALE (256): the p5's WRITE rate
SIMNIC_NICS_PER_GPU = 4         # the p5's 4 NICs per GPU
SIMNIC_MAX_GPUS = 8
SIMNIC_LINE_BPS = 100e9 / 256   # one simulated NIC (SIMNIC_LINE_GBPS / SIMNIC_SCALE defaults)
# WRITEs a second one engine thread moves at 256 bytes (the initiator's side
# or the target's), with room to spare: docs/simnic.md, "The model's own
# costs". An engine that still falls behind is flagged, not hidden.
ENGINE_WRITES_PER_THREAD = 3.0e6
# A run is "preempted" when its writer threads had more involuntary context
# switches than one per 10,000 WRITEs and those switches took time: the
# writers, which busy-poll, were on a CPU less than 98% of their wall time
# (a switch can take a time slice, ~3 ms, thousands of WRITEs; a helper
# thread's wake-up takes microseconds).
PREEMPTION_BOUND = 1 / 10000
PREEMPTION_CPU_SHARE = 0.98
# ... and its engine "fell behind" when more than 5% of its WRITEs went on
# the wire over 1 ms later than the line rate allowed (SIMNIC_REPORT).
ENGINE_LATE_BOUND = 0.05


def allowed_cpus():
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def _topology_int(cpu, name, fallback):
    try:
        return int(pathlib.Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/{name}").read_text())
    except (OSError, ValueError):
        return fallback


def physical_cores(cpus):
    """The cores wholly inside `cpus`, in hwloc's order, each as the list of
    its CPUs (what common/topology.cc pins to: a core's first CPU)."""
    by_core, package_first = {}, {}
    for cpu in cpus:
        package = _topology_int(cpu, "physical_package_id", 0)
        key = (package, _topology_int(cpu, "die_id", 0), _topology_int(cpu, "core_id", cpu))
        by_core.setdefault(key, []).append(cpu)
        package_first.setdefault(package, cpu)
    cores = []
    for key, members in by_core.items():
        try:
            siblings = pathlib.Path(f"/sys/devices/system/cpu/cpu{members[0]}/topology/"
                                    "thread_siblings_list").read_text().strip()
            whole = set(_cpu_list(siblings)) <= set(cpus)
        except OSError:
            whole = True
        cores.append((package_first[key[0]], members[0], members, whole))
    cores.sort()
    full = [c[2] for c in cores if c[3]]
    return full or [[cpu] for cpu in cpus]  # hwloc's fallback: every CPU counts as a core


def _cpu_list(text):
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def engine_threads_for(gpus, nics_per_gpu, page_size):
    line_writes = gpus * nics_per_gpu * SIMNIC_LINE_BPS / (8 * page_size)
    return max(1, -(-int(line_writes) // int(ENGINE_WRITES_PER_THREAD)))


def writer_cpus(cores, gpus):
    """The CPU each group's writer is pinned to from chapter 12 on: the middle
    core of the group's slice of the cores (common/topology.cc)."""
    pinned = []
    for g in range(gpus):
        if len(cores) < gpus:
            part = [cores[g % len(cores)]]
        else:
            part = cores[g * len(cores) // gpus:(g + 1) * len(cores) // gpus]
        pinned.append(part[len(part) // 2][0])
    return pinned


def simnic_layout(page_size, nics_per_gpu=SIMNIC_NICS_PER_GPU, cpus=None):
    """The largest GPU count (<= 8) whose busy threads fit: a writer per group
    on a core of its own, plus each side's engine threads, within the CPUs
    this process may use. The client's one poller backs off when idle and is
    not counted. Returns (gpus, engine threads per process, engine CPUs)."""
    cpus = cpus if cpus is not None else allowed_cpus()
    cores = physical_cores(cpus)
    for gpus in range(SIMNIC_MAX_GPUS, 0, -1):
        engines = engine_threads_for(gpus, nics_per_gpu, page_size)
        if gpus <= len(cores) and gpus + 2 * engines <= len(cpus):
            break
    pinned = set(writer_cpus(cores, gpus))
    free = [c for c in cpus if c not in pinned]
    return gpus, engines, free


def resolve_defaults(args, say=print):
    """Fills in the layout and page size left unset; over simnic, sized to
    this machine (and says so)."""
    simnic = getattr(args, "provider", "") == "simnic"
    if getattr(args, "page_size", None) is None:
        args.page_size = SIMNIC_PAGE_SIZE if simnic else 65536
    if getattr(args, "nics_per_gpu", None) is None:
        args.nics_per_gpu = SIMNIC_NICS_PER_GPU if simnic else 2
    chosen = getattr(args, "gpus", None) is None
    if not simnic:
        if chosen:
            args.gpus = 1
        return
    cpus = allowed_cpus()
    gpus, engines, free = simnic_layout(args.page_size, args.nics_per_gpu, cpus)
    if chosen:
        args.gpus = gpus
    else:
        engines = engine_threads_for(args.gpus, args.nics_per_gpu, args.page_size)
        free = [c for c in cpus if c not in set(writer_cpus(physical_cores(cpus), args.gpus))]
    args.simnic_engine_threads = engines
    args.simnic_engine_cpus = free
    args.simnic_writer_cpus = sorted(set(cpus) - set(free))
    if chosen and say:
        say(f"simnic layout: {args.gpus} GPU(s) x {args.nics_per_gpu} NIC(s), page "
            f"{args.page_size} B: {args.gpus} writer(s) + {engines} + {engines} engine threads "
            f"fit the {len(cpus)} CPU(s) this process may use; one client poller (backs off "
            f"when idle)")


def run_flags(record, report_lines, server_pid):
    """Why a run does not count: 'preempted', 'engine behind', or none."""
    flags = []
    writes = record.get("writes") or 0
    switches = record.get("involuntary_switches")
    cpu, wall = record.get("writer_cpu_seconds"), record.get("writer_wall_seconds")
    share = cpu / wall if cpu is not None and wall else None
    record["writer_cpu_share"] = None if share is None else round(share, 4)
    if writes and switches is not None and switches / writes > PREEMPTION_BOUND and \
            (share is None or share < PREEMPTION_CPU_SHARE):
        flags.append("preempted")
    transmits = late = 0
    for line in report_lines:
        fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        if fields.get("pid") != str(server_pid):
            continue
        transmits += int(fields.get("transmits", 0))
        late += int(fields.get("late", 0))
    record["engine_late_share"] = round(late / transmits, 4) if transmits else None
    if transmits and late / transmits > ENGINE_LATE_BOUND:
        flags.append("engine behind")
    return flags


def engine_cpu_lists(free, engines):
    """SIMNIC_ENGINE_CPUS for the server and for the client: the first
    `engines` free CPUs for the server's engine threads, the next ones for
    the client's (wrapping round when there are fewer)."""
    if not free:
        return "", ""
    server = [free[k % len(free)] for k in range(engines)]
    client = [free[(engines + k) % len(free)] for k in range(engines)]
    return ",".join(map(str, server)), ",".join(map(str, client))


def build(chapter_list, server="server"):
    targets = [f"//chapters/{c}:{b}" for c in chapter_list for b in (server, "client")]
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
    env = {"SIMNIC_NICS": os.environ.get("SIMNIC_NICS", str(args.gpus * args.nics_per_gpu)),
           # A group's NICs share its writer's virtual socket at any layout.
           "SIMNIC_NICS_PER_GROUP": os.environ.get("SIMNIC_NICS_PER_GROUP",
                                                   str(args.nics_per_gpu))}
    engines = getattr(args, "simnic_engine_threads", None)
    if engines and not os.environ.get("SIMNIC_ENGINE_THREADS"):
        env["SIMNIC_ENGINE_THREADS"] = str(engines)
    free = getattr(args, "simnic_engine_cpus", None)
    if free and not os.environ.get("SIMNIC_ENGINE_CPUS"):
        env["SIMNIC_ENGINE_CPUS"] = ",".join(str(c) for c in free)
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


def note_pid(args, role, process, echo):
    """Says which process is which: printed, and in --pid-dir if given."""
    if echo:
        print(f"run_chapter: {role} pid {process.pid}", flush=True)
    pid_dir = getattr(args, "pid_dir", None)
    if pid_dir:
        pathlib.Path(pid_dir).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(pid_dir) / f"{role}.pid").write_text(f"{process.pid}\n")


# Lines that only frame a server's output: never the reason it failed.
FRAMING = re.compile(r"^(-+|Waiting for a client \(Ctrl-C to stop\)\.)$")
# A line that says why: an error, an abandoned or failed transfer, a stop.
REASON = re.compile(r"error|fail|abandon|cannot|refus|stopp|timed? ?out|stall|killed|"
                    r"no (?:such|answer|client)", re.I)


def last_lines(lines, count):
    kept = [line.rstrip() for line in lines if line.strip() and not FRAMING.match(line.strip())]
    return "\n".join(kept[-count:])


def reason(lines):
    """The last line that says why a process failed (an error, an abandoned
    transfer), else its last line that is not framing ("Waiting for a
    client")."""
    kept = [line.rstrip() for line in lines if line.strip() and not FRAMING.match(line.strip())]
    said = [line for line in kept if REASON.search(line)]
    return (said or kept or [""])[-1]


def run_once(args, chapter, echo=True):
    """Runs one transfer; returns the server's result record (a dict)."""
    if getattr(args, "page_size", None) is None or getattr(args, "gpus", None) is None or \
            getattr(args, "nics_per_gpu", None) is None:
        resolve_defaults(args, say=None)
    simnic = args.provider == "simnic"
    client_extra = list(getattr(args, "client_arg", []))
    if simnic and not any(a.startswith("--poll-threads") for a in client_extra):
        client_extra += ["--poll-threads", "one"]
    buffer_size = args.buffer_size or max(args.page_size * args.pages, 4096)
    layout = ["--provider", args.provider, "--memory", args.memory, "--gpus", str(args.gpus),
              "--nics-per-gpu", str(args.nics_per_gpu), "--buffer-size", str(buffer_size)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        census = getattr(args, "atomic_census", False)
        server_cmd = [binary(args, chapter, "server_atomic_census" if census else "server"),
                      "--once", "--repeat", str(args.repeat),
                      "--address-file", str(tmp / "address"), "--result-json",
                      str(tmp / "server.json"), *layout, *getattr(args, "server_arg", [])]
        extra_env = simnic_env(args)
        if simnic:
            extra_env["SIMNIC_REPORT"] = str(tmp / "simnic-report")
        server_env, client_env = dict(extra_env), dict(extra_env)
        if census:
            server_env["TUTORIAL_ATOMIC_CENSUS"] = str(tmp / "atomic-census")
        if simnic and "SIMNIC_ENGINE_CPUS" in extra_env and \
                not os.environ.get("SIMNIC_ENGINE_CPUS"):
            # Each process's engine threads on CPUs of their own (simnic
            # pins engine thread k to the k-th CPU of its list).
            server_env["SIMNIC_ENGINE_CPUS"], client_env["SIMNIC_ENGINE_CPUS"] = \
                engine_cpu_lists(getattr(args, "simnic_engine_cpus", None) or [],
                                 getattr(args, "simnic_engine_threads", None) or 1)
        if simnic and getattr(args, "simnic_engine_cpus", None) and \
                not os.environ.get("TUTORIAL_HELPER_CPUS"):
            # The server's helper threads (its watches, the front door's BUSY
            # answerer) wake every 20-50 ms: off the writers' CPUs
            # (harness/thread_stats.h), and off the engines' where CPUs are
            # left over.
            free = args.simnic_engine_cpus
            engines = getattr(args, "simnic_engine_threads", None) or 1
            spare = free[2 * engines:] or free
            server_env["TUTORIAL_HELPER_CPUS"] = ",".join(map(str, spare))
        # Over simnic the server runs on its writers' CPUs and the client (its
        # poller) beside the engine threads, so that unpinned writers
        # (chapters 09-11) never take an engine's CPU.
        writer_set = getattr(args, "simnic_writer_cpus", None) if simnic else None
        engine_set = getattr(args, "simnic_engine_cpus", None) if simnic else None
        split = bool(writer_set and engine_set)

        def on_cpus(cpus):
            return (lambda: os.sched_setaffinity(0, cpus)) if split else None

        server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env_with(args.server_env, server_env),
                                  preexec_fn=on_cpus(writer_set))
        note_pid(args, "server", server, echo)
        try:
            deadline = time.monotonic() + 60
            while not (tmp / "address").exists() or not (tmp / "address").read_text().strip():
                if server.poll() is not None or time.monotonic() > deadline:
                    out = server.stdout.read().splitlines() if server.stdout else []
                    raise RuntimeError(f"{chapter} server did not start: "
                                       f"{last_lines(out, 3) or 'no output'}")
                time.sleep(0.05)
            address = (tmp / "address").read_text().strip()
            client_cmd = [binary(args, chapter, "client"), "--server", address, "--page-size",
                          str(args.page_size), "--pages", str(args.pages), "--timeout",
                          str(args.timeout), "--result-json", str(tmp / "client.json"), *layout,
                          *client_extra]
            client = subprocess.Popen(client_cmd, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      env=env_with(args.client_env, client_env),
                                      preexec_fn=on_cpus(engine_set))
            note_pid(args, "client", client, echo)
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
                    raise RuntimeError(f"{chapter}: no result within {args.timeout + 30:.0f} s"
                                       + ("" if echo else "\n" + last_lines(server_lines, 5)))
                time.sleep(0.05)
            for pumper in pumpers:
                pumper.join(timeout=5)
            client_out = "".join(client_lines)
            if echo and server.returncode == 0 and client.returncode == 0:
                for line in client_out.splitlines()[-2:]:
                    print(f"  client| {line}", flush=True)
            # One short message: the server's lines were echoed as they came;
            # the message quotes the line that says why, not the "Waiting for
            # a client" a server prints after a failed transfer.
            server_said = reason(server_lines) if echo else last_lines(server_lines, 5)
            client_said = reason(client_lines)
            if server.returncode != 0:
                raise RuntimeError(f"{chapter} server failed (exit {server.returncode}): "
                                   f"{server_said or 'no output'}")
            if client.returncode != 0:
                raise RuntimeError(f"{chapter} client failed (exit {client.returncode}): "
                                   f"{client_said or 'no output'}")
            record = json.loads((tmp / "server.json").read_text().splitlines()[-1])
            record["command"] = " ".join(["server", *server_cmd[1:]])
            if census:
                record.update(census_counts(tmp / "atomic-census", server.pid))
            if simnic:
                report = tmp / "simnic-report"
                lines = report.read_text().splitlines() if report.exists() else []
                record["flags"] = run_flags(record, lines, server.pid)
                record["layout"] = f"{args.gpus}x{args.nics_per_gpu}"
                record["page_size"] = args.page_size
                if record["flags"]:
                    print(f"  run flagged ({', '.join(record['flags'])}): it does not count",
                          flush=True)
            return record
        finally:
            for p in (server, locals().get("client")):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()


# What the census build's line says (harness/atomic_census.cc), and the
# record's key for each.
CENSUS_KEYS = {"rmw": "atomic_rmw", "stores": "atomic_stores",
               "cross_thread_writes": "cross_thread_atomic_writes"}


def census_counts(path, server_pid):
    """The server's census line as record keys; {} when there is none."""
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        if line.startswith("atomic-census ") and fields.get("pid") == str(server_pid):
            return {key: int(fields[name]) for name, key in CENSUS_KEYS.items()
                    if name in fields}
    return {}


# The server record's counters shown by --counters: (key, divided by the
# record's `writes`?).
COUNTERS = [("post_calls", True), ("doorbells", True), ("eagain", True), ("cq_reads", True),
            ("cq_empty_reads", True), ("cq_entries", True), ("op_allocations", True),
            ("ns_per_write_provider", False), ("ns_per_write_app", False),
            ("longest_write_run", False), ("migrations", False), ("involuntary_switches", False),
            ("atomic_rmw", True), ("atomic_stores", True), ("cross_thread_atomic_writes", True)]


def counters_text(record):
    """The record's counters, per WRITE where that is what teaches, one a line."""
    writes = record.get("writes") or 0
    lines = [f"{record.get('chapter', '')}: {writes} WRITE(s), {record.get('mops', 0):.4f} Mops/s, "
             f"{record.get('gbps', 0):.3f} Gbps, threading {record.get('threading', '?')}, "
             f"op_pool {record.get('op_pool', '?')}, doorbell_batching "
             f"{record.get('doorbell_batching', '?')}"]
    for key, per_write in COUNTERS:
        if key not in record:
            continue  # built with -DTUTORIAL_NO_COUNTERS, or not a census build
        value = record[key]
        if per_write:
            shown = f"{value / writes:.3f} per WRITE" if writes else "-"
            lines.append(f"  {key:<26} {shown:>18}   ({value} in all)")
        else:
            lines.append(f"  {key:<26} {value:>18.1f}" if isinstance(value, float)
                         else f"  {key:<26} {value:>18}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapter", choices=chapters())
    add_run_flags(parser)
    parser.add_argument("--counters", action="store_true",
                        help="print the writer threads' counters, per WRITE, instead of the "
                        "JSON line")
    parser.add_argument("--json", action="store_true",
                        help="print the server's JSON result line (the default without "
                        "--counters)")
    parser.add_argument("--atomic-census", action="store_true",
                        help="run the census build of the server (:server_atomic_census): the "
                        "counters gain its atomic operations per WRITE; its rate is not the "
                        "chapter's")
    args = parser.parse_args()
    resolve_defaults(args)
    if not args.bin_dir and not args.no_build:
        build([args.chapter], "server_atomic_census" if args.atomic_census else "server")
    try:
        record = run_once(args, args.chapter)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"run_chapter: error: {e}", file=sys.stderr)
        return 1
    if args.json or not args.counters:
        print(json.dumps(record))
    if args.counters:
        print(counters_text(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
