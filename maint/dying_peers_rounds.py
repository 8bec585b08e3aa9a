#!/usr/bin/env python3
"""Records rounds of clients stopped at plain random moments.

One server of a chapter (the last one by default) with --repeat 10 and
otherwise default flags, per provider. Each round: a client with default
flags is stopped with SIGINT or SIGKILL at a random delay after its start
(seeded, printed), then a good client that must verify every byte (waiting
is allowed, up to --good-timeout). After every round the tool records:

  - what the stopped client and the good client did (exit code or signal,
    their last line, the good client's time and whether it verified);
  - whether the server is alive (a dead one is recorded and restarted, so
    the remaining rounds still say something);
  - *.btr backtrace files left in the run's folder (every process of the
    run starts there: a backtrace handler loaded with libfabric writes them
    into its working directory);
  - /dev/shm files of processes of the run that are gone, and zombies;
  - the server's RSS (kB) and open fd count.

It ends with summary.json and summary.md in --out (for results/dying-peers/),
and the line "dying-peers rounds: PASS" or "...: FAIL (why)" by the issue's
rule: no server or client death, no backtrace file, every good client
verified, no stale /dev/shm file or zombie, the server's RSS within 10% of
its value after the first round, and its fd count back to that value.
Exit code 0 on PASS, 1 on FAIL, 2 on bad usage.

  maint/dying_peers_rounds.py --rounds 50                        # the recorded run
  maint/dying_peers_rounds.py --rounds 3 --providers shm --out /tmp/dp
  LIBFABRIC_PREFIX=/opt/amazon/efa maint/dying_peers_rounds.py --rounds 50

Binaries: --bin-dir (a folder with <chapter>/server and <chapter>/client),
else bazel-bin/chapters (build them first: bazel build //chapters/18_more:all).
libfabric: the one the binaries find; LIBFABRIC_PREFIX=<prefix> puts
<prefix>/lib (or lib64) first on LD_LIBRARY_PATH of every process started.
Bounded: --time-limit seconds for the whole run (no round starts after it),
and every wait has a deadline.
"""
import argparse
import datetime
import glob
import json
import os
import pathlib
import platform
import random
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from peer_processes import read, wait_for  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
SIGNALS = {"SIGINT": signal.SIGINT, "SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Rounds of clients stopped at random delays, each followed by a good "
        "client, against one server; records outcome, leftovers, RSS and fds.")
    p.add_argument("--chapter", default="18_more", help="chapter whose binaries run (default: %(default)s)")
    p.add_argument("--bin-dir", type=pathlib.Path, default=None,
                   help="folder with <chapter>/server and <chapter>/client (default: bazel-bin/chapters)")
    p.add_argument("--providers", default="shm,tcp", help="comma-separated (default: %(default)s)")
    p.add_argument("--signals", default="SIGINT,SIGKILL",
                   help="comma-separated, of " + ", ".join(SIGNALS) + " (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=50, help="rounds per provider and signal (default: %(default)s)")
    p.add_argument("--seed", type=int, default=None, help="seed of the delays (default: from the clock; printed)")
    p.add_argument("--min-delay", type=float, default=0.05, help="seconds (default: %(default)s)")
    p.add_argument("--max-delay", type=float, default=2.0, help="seconds (default: %(default)s)")
    p.add_argument("--repeat", default="10", help="the server's --repeat (default: %(default)s)")
    p.add_argument("--server-args", default="", help="more server flags, space-separated (default: none)")
    p.add_argument("--client-args", default="", help="more client flags, space-separated (default: none)")
    p.add_argument("--good-timeout", type=float, default=300,
                   help="the good client's --timeout, seconds (default: %(default)s)")
    p.add_argument("--time-limit", type=float, default=4 * 3600,
                   help="no round starts after this many seconds (default: %(default)s)")
    p.add_argument("--out", type=pathlib.Path, default=None,
                   help="folder for logs and the summary (default: a new folder under /tmp)")
    p.add_argument("--label", default="", help="a word for the summary (e.g. the machine)")
    args = p.parse_args(argv)
    for s in args.signals.split(","):
        if s not in SIGNALS:
            p.error(f"unknown signal {s}")
    if not 0 <= args.min_delay <= args.max_delay:
        p.error("need 0 <= --min-delay <= --max-delay")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def binaries(args):
    base = args.bin_dir if args.bin_dir else ROOT / "bazel-bin" / "chapters"
    found = []
    for name in ("server", "client"):
        path = (pathlib.Path(base) / args.chapter / name).resolve()
        if not path.exists():
            sys.exit(f"dying_peers_rounds: {path} not found (bazel build //chapters/"
                     f"{args.chapter}:all, or pass --bin-dir)")
        found.append(str(path))
    return found


def child_env():
    env = dict(os.environ)
    prefix = env.get("LIBFABRIC_PREFIX")
    if prefix:
        libs = [d for d in (os.path.join(prefix, "lib"), os.path.join(prefix, "lib64"))
                if os.path.isdir(d)]
        if not libs:
            sys.exit(f"dying_peers_rounds: LIBFABRIC_PREFIX={prefix} has no lib/ or lib64/")
        env["LD_LIBRARY_PATH"] = ":".join(libs + [p for p in [env.get("LD_LIBRARY_PATH")] if p])
    return env


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else ""


def wait_process(p, seconds):
    """Waits, bounded; a process still there afterwards is killed."""
    try:
        return p.wait(seconds), False
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait(), True


def describe(code):
    if code is None:
        return "running"
    if code < 0:
        try:
            return "killed by " + signal.Signals(-code).name
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def proc_status(pid):
    """(RSS kB, open fds) of a live process, else (None, None)."""
    rss = None
    for line in read(f"/proc/{pid}/status").splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = None
    return rss, fds


def zombies(pids):
    """Zombie processes among `pids` or whose parent is one of them or us."""
    parents = set(pids) | {os.getpid()}
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        text = read(stat)
        m = re.match(r"(\d+) \((.*)\) (\S) (\d+)", text)
        if m and m.group(3) == "Z" and (int(m.group(1)) in pids or int(m.group(4)) in parents):
            found.append(f"{m.group(1)} ({m.group(2)})")
    return found


IDLE_LINE = "Waiting for a client (Ctrl-C to stop)."
SWEEP_GRACE = 3.0  # seconds


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(pid, 0).
    return "Z" not in read(f"/proc/{pid}/stat").split(")")[-1][:3]


def btr_pid(path):
    """The process a backtrace file is of: libinfinipath names it
    "<program>.80s-<pid>,<host>.btr" (sic); None when the name says not."""
    m = re.search(r"-(\d+),[^/]*\.btr$", path)
    return int(m.group(1)) if m else None


def stale_shm(pids):
    """/dev/shm files named "<pid>:..." of processes of ours that are gone."""
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return []
    gone = {str(pid) for pid in pids if not alive(pid)}
    return sorted(n for n in names if n.split(":")[0] in gone)


class Run:
    def __init__(self, args):
        self.args = args
        self.server_bin, self.client_bin = binaries(args)
        self.env = child_env()
        self.seed = args.seed if args.seed is not None else int(time.time() * 1000) % 1000000
        stamp = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
        self.out = args.out or pathlib.Path(f"/tmp/dying-peers-rounds-{stamp}")
        self.out.mkdir(parents=True, exist_ok=True)
        self.rounds = []
        self.servers = []  # every server started: provider, pid, how it ended
        self.pids = []  # every process started: their /dev/shm files are ours
        self.started = time.monotonic()
        self.timed_out = False
        self.stale_seen = set()
        self.libfabric = ""

    # --- processes ---------------------------------------------------------
    def start_server(self, provider, workdir, n):
        log = workdir / f"server-{n}.log"
        address = workdir / f"address-{n}"
        cmd = [self.server_bin, "--provider", provider, "--repeat", self.args.repeat,
               "--address-file", str(address)] + self.args.server_args.split()
        with open(log, "w") as out:
            p = subprocess.Popen(cmd, cwd=workdir, env=self.env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.pids.append(p.pid)
        if not wait_for(lambda: "Waiting for a client" in read(log) or p.poll() is not None, 120):
            p.kill()
            p.wait()
        if p.poll() is not None:
            sys.exit(f"dying_peers_rounds: the {provider} server did not start:\n" + read(log)[-2000:])
        m = re.search(r"libfabric (\S+)", read(log))
        if m and not self.libfabric:
            self.libfabric = m.group(1)
        record = {"provider": provider, "pid": p.pid, "log": str(log.relative_to(self.out)),
                  "command": " ".join(cmd), "end": None}
        self.servers.append(record)
        return p, log, read(address).strip(), record

    def client(self, provider, address, workdir, tag, timeout):
        log = workdir / f"client-{tag}.log"
        cmd = [self.client_bin, "--provider", provider, "--server", address, "--timeout",
               str(timeout)] + self.args.client_args.split()
        with open(log, "w") as out:
            p = subprocess.Popen(cmd, cwd=workdir, env=self.env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.pids.append(p.pid)
        return p, log

    # --- one round ----------------------------------------------------------
    def round(self, provider, sig_name, r, rnd, server, workdir):
        p_server, server_log, address, _ = server
        delay = round(rnd.uniform(self.args.min_delay, self.args.max_delay), 3)
        tag = f"{provider}-{sig_name}-{r}"
        rec = {"provider": provider, "signal": sig_name, "round": r, "delay_s": delay,
               "server_pid": p_server.pid}
        btr_before = set(glob.glob(str(workdir / "*.btr")))
        # The stopped client.
        p, log = self.client(provider, address, workdir, tag + "-stopped", self.args.good_timeout)
        ended_early = wait_for(lambda: p.poll() is not None, delay, 0.005)
        if not ended_early:
            p.send_signal(SIGNALS[sig_name])
        code, hung = wait_process(p, 60)
        text = read(log)
        rec["stopped"] = {"pid": p.pid, "end": describe(code), "signal_sent": not ended_early,
                          "hung_after_signal": hung,
                          "died_of_own_signal": code < 0 and -code != SIGNALS[sig_name],
                          "phase": ("verified" if "every byte correct" in text else
                                    "notices" if "reported the last write" in text else
                                    "waiting for writes" if "Sent RANDOM_FILL" in text else
                                    "connect"),
                          "last_line": last_line(text)}
        # The good client, right away: a server still busy with the stopped
        # one must make it wait, not turn it away.
        start = time.monotonic()
        p, log = self.client(provider, address, workdir, tag + "-good", self.args.good_timeout)
        code, hung = wait_process(p, self.args.good_timeout + 60)
        text = read(log)
        rec["good"] = {"pid": p.pid, "end": describe(code), "hung": hung,
                       "seconds": round(time.monotonic() - start, 3),
                       "verified": code == 0 and "every byte correct" in text,
                       "died_of_signal": code < 0, "last_line": last_line(text)}
        # What is left.
        rec["server_alive"] = p_server.poll() is None
        if not rec["server_alive"]:
            rec["server_end"] = describe(p_server.returncode)
            rec["server_tail"] = read(server_log)[-1500:]
        btr = sorted(set(glob.glob(str(workdir / "*.btr"))) - btr_before)
        rec["btr_files"] = [os.path.basename(f) for f in btr]
        # The handler that writes them ends the process with exit(1), not
        # with the signal: the file is what says that a process crashed.
        crashed = {btr_pid(f) for f in btr}
        rec["stopped"]["crashed"] = rec["stopped"]["pid"] in crashed
        rec["good"]["crashed"] = rec["good"]["pid"] in crashed
        rec["server_crashed"] = p_server.pid in crashed
        rec["btr_heads"] = [read(f)[:400] for f in btr]
        # The round is over once the server says it waits for the next
        # client. Right after the good client it is still rebuilding its
        # endpoints (after every transfer), old and new ones alive at once.
        rec["server_idle"] = wait_for(
            lambda: read(server_log).rstrip().endswith(IDLE_LINE) or p_server.poll() is not None,
            30)
        # A process killed with SIGKILL leaves its /dev/shm files; the server
        # removes them once it has seen the process dead for a second, at a
        # poll of its front door (StaleFileSweeper, harness/recovery.h): what
        # is still there SWEEP_GRACE seconds later is stale.
        wait_for(lambda: not stale_shm(self.pids), SWEEP_GRACE)
        rec["stale_shm"] = stale_shm(self.pids)
        # Counted once, in the round that left them.
        rec["new_stale_shm"] = sorted(set(rec["stale_shm"]) - self.stale_seen)
        self.stale_seen |= set(rec["stale_shm"])
        rec["zombies"] = zombies(self.pids)
        rec["server_rss_kb"], rec["server_fds"] = proc_status(p_server.pid)
        return rec

    # --- the run ------------------------------------------------------------
    def run(self):
        a = self.args
        print(f"dying_peers_rounds: chapter {a.chapter}, seed {self.seed} (replay with --seed "
              f"{self.seed}), {a.rounds} round(s) per provider and signal, delays "
              f"{a.min_delay}-{a.max_delay} s, server --repeat {a.repeat}, out {self.out}",
              flush=True)
        with open(self.out / "rounds.jsonl", "w") as rounds_file:
            for provider in a.providers.split(","):
                workdir = self.out / provider
                workdir.mkdir(exist_ok=True)
                n_server = 0
                server = self.start_server(provider, workdir, n_server)
                try:
                    for sig_name in a.signals.split(","):
                        rnd = random.Random(f"{self.seed}-{provider}-{sig_name}")
                        for r in range(a.rounds):
                            if time.monotonic() - self.started > a.time_limit:
                                self.timed_out = True
                                break
                            rec = self.round(provider, sig_name, r, rnd, server, workdir)
                            self.rounds.append(rec)
                            rounds_file.write(json.dumps(rec) + "\n")
                            rounds_file.flush()
                            print(self.one_line(rec), flush=True)
                            if not rec["server_alive"]:
                                server[3]["end"] = rec["server_end"]
                                n_server += 1
                                server = self.start_server(provider, workdir, n_server)
                finally:
                    p_server, log, _, record = server
                    if p_server.poll() is None:
                        p_server.send_signal(signal.SIGINT)
                        code, hung = wait_process(p_server, 60)
                        record["end"] = describe(code) + (" (killed: did not stop in 60 s)"
                                                          if hung else "")
                    else:
                        record["end"] = describe(p_server.returncode)
                # After the server stopped: nothing of this provider may stay.
                self.final_leftovers = {"stale_shm": stale_shm(self.pids),
                                        "zombies": zombies(self.pids)}
        return self.summarize()

    @staticmethod
    def one_line(rec):
        good = rec["good"]
        flags = []
        if not rec["server_alive"]:
            flags.append("SERVER " + rec["server_end"])
        if rec["stopped"]["died_of_own_signal"] or rec["stopped"]["crashed"]:
            flags.append("stopped client CRASHED (" + rec["stopped"]["end"] + ")")
        if good["died_of_signal"] or good["crashed"]:
            flags.append("good client CRASHED (" + good["end"] + ")")
        for key in ("btr_files", "new_stale_shm", "zombies"):
            if rec[key]:
                flags.append(f"{key} {rec[key]}")
        verdict = "verified" if good["verified"] else "NOT verified: " + good["last_line"]
        return (f"  {rec['provider']} {rec['signal']} round {rec['round']}: delay "
                f"{rec['delay_s']:.3f} s ({rec['stopped']['phase']}), good client {verdict} in "
                f"{good['seconds']:.1f} s; server rss {rec['server_rss_kb']} kB, fds "
                f"{rec['server_fds']}" + ("; " + "; ".join(flags) if flags else ""))

    # --- summary -----------------------------------------------------------
    def summarize(self):
        a = self.args
        groups = {}
        for rec in self.rounds:
            g = groups.setdefault(f"{rec['provider']} {rec['signal']}", {
                "rounds": 0, "good_verified": 0, "server_deaths": 0, "client_deaths": 0,
                "btr_files": 0, "stale_shm_rounds": 0, "zombie_rounds": 0, "signal_sent": 0})
            g["rounds"] += 1
            g["good_verified"] += rec["good"]["verified"]
            g["server_deaths"] += not rec["server_alive"]
            g["client_deaths"] += ((rec["stopped"]["died_of_own_signal"] or rec["stopped"]["crashed"])
                                   + (rec["good"]["died_of_signal"] or rec["good"]["crashed"]))
            g["btr_files"] += len(rec["btr_files"])
            g["stale_shm_rounds"] += bool(rec["new_stale_shm"])
            g["zombie_rounds"] += bool(rec["zombies"])
            g["signal_sent"] += rec["stopped"]["signal_sent"]
        # RSS and fds of each server that lived through its rounds, against
        # its value after its first round.
        memory = []
        for server in self.servers:
            mine = [r for r in self.rounds if r["server_pid"] == server["pid"] and
                    r["server_rss_kb"] is not None]
            if len(mine) < 2:
                continue
            rss0, fds0 = mine[0]["server_rss_kb"], mine[0]["server_fds"]
            rss = [r["server_rss_kb"] for r in mine]
            memory.append({
                "provider": server["provider"], "pid": server["pid"], "rounds": len(mine),
                "rss_kb_after_first": rss0, "rss_kb_min": min(rss), "rss_kb_max": max(rss),
                "rss_max_deviation": round(max(abs(x - rss0) for x in rss) / rss0, 4),
                "fds_after_first": fds0, "fds_last": mine[-1]["server_fds"],
                "fds_max": max(r["server_fds"] for r in mine)})
        failures = []
        total = len(self.rounds)
        for name, g in groups.items():
            if g["server_deaths"]:
                failures.append(f"{name}: server died in {g['server_deaths']} round(s)")
            if g["client_deaths"]:
                failures.append(f"{name}: {g['client_deaths']} client(s) crashed")
            if g["good_verified"] < g["rounds"]:
                failures.append(f"{name}: {g['good_verified']}/{g['rounds']} good clients verified")
            if g["btr_files"]:
                failures.append(f"{name}: {g['btr_files']} backtrace file(s)")
            if g["stale_shm_rounds"]:
                failures.append(f"{name}: stale /dev/shm files after {g['stale_shm_rounds']} round(s)")
            if g["zombie_rounds"]:
                failures.append(f"{name}: zombies after {g['zombie_rounds']} round(s)")
        for m in memory:
            if m["rss_max_deviation"] > 0.10:
                failures.append(f"{m['provider']} server {m['pid']}: RSS moved "
                                f"{m['rss_max_deviation']:.0%} from {m['rss_kb_after_first']} kB")
            if m["fds_last"] != m["fds_after_first"]:
                failures.append(f"{m['provider']} server {m['pid']}: fds {m['fds_after_first']} "
                                f"after the first round, {m['fds_last']} at the end")
        for key in ("stale_shm", "zombies"):
            if getattr(self, "final_leftovers", {}).get(key):
                failures.append(f"after the servers stopped: {key} {self.final_leftovers[key]}")
        if self.timed_out:
            failures.append(f"--time-limit {a.time_limit:.0f} s reached after {total} round(s)")
        wanted = a.rounds * len(a.providers.split(",")) * len(a.signals.split(","))
        summary = {
            "tool": "maint/dying_peers_rounds.py", "argv": sys.argv[1:], "seed": self.seed,
            "chapter": a.chapter, "libfabric": self.libfabric,
            "libfabric_prefix": os.environ.get("LIBFABRIC_PREFIX", ""),
            "ld_library_path": self.env.get("LD_LIBRARY_PATH", ""),
            "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores",
            "label": a.label, "git": git_describe(),
            "date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
            "server_repeat": a.repeat, "delays_s": [a.min_delay, a.max_delay],
            "rounds_wanted": wanted, "rounds_run": total, "groups": groups, "servers": self.servers,
            "memory": memory, "final_leftovers": getattr(self, "final_leftovers", {}),
            "failures": failures, "pass": not failures and total == wanted,
            "seconds": round(time.monotonic() - self.started, 1)}
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        (self.out / "summary.md").write_text(markdown(summary))
        verdict = "PASS" if summary["pass"] else "FAIL (" + "; ".join(failures[:6]) + (
            "; ..." if len(failures) > 6 else "") + ")"
        print(f"dying-peers rounds: {verdict}\nsummary: {self.out / 'summary.md'}", flush=True)
        return 0 if summary["pass"] else 1


def git_describe():
    try:
        return subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def markdown(s):
    lines = [f"# Dying peers at random delays: {'PASS' if s['pass'] else 'FAIL'}", "",
             f"- chapter {s['chapter']}, libfabric {s['libfabric'] or '?'}"
             + (f" (LIBFABRIC_PREFIX={s['libfabric_prefix']})" if s['libfabric_prefix'] else ""),
             f"- machine: {s['machine']}" + (f" ({s['label']})" if s['label'] else ""),
             f"- commit {s['git']}, {s['date_utc']} UTC, {s['seconds']} s",
             f"- server `--repeat {s['server_repeat']}`, otherwise default flags; clients default "
             f"flags; stopped at a random delay of {s['delays_s'][0]}-{s['delays_s'][1]} s; "
             f"seed {s['seed']}",
             f"- command: `maint/dying_peers_rounds.py {' '.join(s['argv'])}`",
             f"- rounds: {s['rounds_run']} of {s['rounds_wanted']}", "",
             "| provider, signal | rounds | signal sent | good verified | server deaths | "
             "client deaths | *.btr | rounds leaving stale /dev/shm | rounds with zombies |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, g in s["groups"].items():
        lines.append(f"| {name} | {g['rounds']} | {g['signal_sent']} | {g['good_verified']} | "
                     f"{g['server_deaths']} | {g['client_deaths']} | {g['btr_files']} | "
                     f"{g['stale_shm_rounds']} | {g['zombie_rounds']} |")
    lines += ["", "| server | rounds | RSS after round 1 (kB) | RSS min-max (kB) | max deviation "
              "| fds after round 1 | fds last | fds max |", "|---|---|---|---|---|---|---|---|"]
    for m in s["memory"]:
        lines.append(f"| {m['provider']} pid {m['pid']} | {m['rounds']} | {m['rss_kb_after_first']} "
                     f"| {m['rss_kb_min']}-{m['rss_kb_max']} | {m['rss_max_deviation']:.1%} | "
                     f"{m['fds_after_first']} | {m['fds_last']} | {m['fds_max']} |")
    lines += ["", "Servers: " + "; ".join(f"{x['provider']} pid {x['pid']}: {x['end']}"
                                         for x in s["servers"]), ""]
    if s["failures"]:
        lines += ["Failures:", ""] + [f"- {f}" for f in s["failures"]] + [""]
    lines += ["Every round is a line of rounds.jsonl; the processes' logs are in the "
              "provider folders.", ""]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return Run(args).run()


if __name__ == "__main__":
    sys.exit(main())
