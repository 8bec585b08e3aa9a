#!/usr/bin/env python3
"""Runs every chapter on this machine and writes a table and a plot.

Builds every chapter's server and client, runs each chapter a few times over a
local provider (tools/run_chapter.py does one run), keeps the median, and
writes into a folder named <machine>-<provider>-<memory>:

  results.md    the table, with the machine, libfabric, command line and date,
                and a table of the counters each chapter's idea moves
  results.csv   the same numbers, one row per chapter
  results.json  the settings and every run's raw server record
  plot.png      Gbps and Mops/s per chapter, beside the series' p5 ladder

The counters (docs/counters.md) are medians over the runs, per
WRITE where that is what teaches (post calls, doorbells, CQ reads, EAGAINs
and allocations per WRITE, CPU ns per WRITE inside and outside provider
calls), and as counts for the writer threads' migrations and involuntary
context switches.

A run over the simulated NIC (--provider simnic) is labelled "simulated"
everywhere: in the folder's name (which must contain "simnic"), in the
title and first lines of results.md, in results.csv's `kind` column, in
results.json's meta and on the plot. Its numbers are a simulation's, never
a provider's measurement.

By default that folder is out/results/<name>/, which git ignores: a run
leaves the checkout as it was. Recording is a separate, explicit step:
--record writes into results/<name>/ (tracked) and refreshes the result
tables of the docs pages (maint/docs_diff.py --write); --record-from copies a
folder made earlier into results/ the same way, without measuring again.

  python3 tools/compare.py                      # shm, host memory, 3 runs each
  python3 tools/compare.py --provider tcp
  python3 tools/compare.py --provider shm --gpus 2 --nics-per-gpu 2
  python3 tools/compare.py --chapters 13_shard 14_batch --runs 5
  python3 tools/compare.py --record-from out/results/2core-amd-epyc-shm-host
  python3 tools/compare.py --record             # measure and record at once
  python3 tools/compare.py --redraw results/2core-amd-epyc-shm-host

<machine> is --machine, or a slug of the core count and CPU model
("2core-amd-epyc"). A layout other than 1 GPU x 2 NICs adds "-<G>x<K>" to the
folder name, a page size other than 65536 adds "-page<B>"; --out names the
folder outright (a folder under results/ only with --record).
"""
import argparse
import contextlib
import csv
import datetime
import io
import json
import math
import os
import pathlib
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run_chapter  # noqa: E402
import series  # noqa: E402
import simnic_fit  # noqa: E402

ROOT = run_chapter.ROOT
RECORDED = ROOT / "results"  # tracked: the docs pages' tables come from here
SCRATCH = ROOT / "out" / "results"  # git-ignored: where a run writes unless told to record
RESULT_FILES = ("results.md", "results.csv", "results.json", "plot.png")
DEFAULT_LAYOUT = (1, 2)  # GPUs, NICs per GPU: run_chapter's defaults
DEFAULT_PAGE_SIZE = 65536  # the series' page
# The counters kept per chapter: (column, the server record's key, divided
# by the record's `writes`?, heading in results.md, digits shown).
COUNTERS = [
    ("post_calls_per_write", "post_calls", True, "post calls / WRITE", 3),
    ("doorbells_per_write", "doorbells", True, "doorbells / WRITE", 3),
    ("cq_reads_per_write", "cq_reads", True, "CQ reads / WRITE", 3),
    ("eagain_per_write", "eagain", True, "EAGAIN / WRITE", 4),
    ("op_allocations_per_write", "op_allocations", True, "allocations / WRITE", 4),
    ("ns_per_write_provider", "ns_per_write_provider", False, "CPU ns / WRITE in provider", 1),
    ("ns_per_write_app", "ns_per_write_app", False, "CPU ns / WRITE in app", 1),
    ("migrations", "migrations", False, "migrations", 0),
    ("involuntary_switches", "involuntary_switches", False, "involuntary switches", 0),
]
COUNTER_FIELDS = [c[0] for c in COUNTERS]
CSV_FIELDS = ["chapter", "idea", "runs", "runs_ok", "runs_flagged", "flags", "gbps_median", "mops_median", "gbps_min",
              "gbps_max", "seconds_median", "vs_previous", "series_p5_gbps", "series_p5_mops",
              "provider", "memory", "gpus", "nics_per_gpu", "page_size", "pages", "repeat",
              "libfabric", "libfabric_path", "machine", "kind", "counter_rule", "step",
              "step_noise", "step_verdict", "predicted_mops", "prediction_error"] + COUNTER_FIELDS
SIMULATED_PROVIDERS = ("simnic",)  # a simulated NIC: its numbers are never measurements
# --cpu-limited: pages small enough that the line leaves every chapter's
# writers limited by their CPU, and the chapters whose lessons need that.
CPU_LIMITED_PAGE_SIZE = 128
CPU_LIMITED_CHAPTERS = ("14_batch", "15_lazy", "16_thread_domain", "17_op_pool", "18_more")
# Welch's t-test decides whether a step is beyond the noise: the step is the
# ratio of the two chapters' geometric mean rates, and its uncertainty the
# half-width of the 95% interval of the difference of their mean log rates
# (t quantile for the Welch-Satterthwaite degrees of freedom). More runs
# shrink it, as the standard error of a mean does.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042,
         40: 2.021, 60: 2.000, 120: 1.980}
# --cpu-limited: how many runs per chapter. The rule: enough that the
# smallest lesson step the frozen model predicts for this machine (before
# the runs) is twice its expected uncertainty, given one run's spread of
# log rate RUN_SPREAD, between CPU_LIMITED_RUNS limits.
# RUN_SPREAD: the pooled standard deviation of one chapter's log rate
# between runs at 128-byte pages on 4, 6 and 8 CPUs in results/h200x2-fresh
# (0.035, 0.033, 0.023), rounded. The most runs: with 36 a chapter every
# 128-byte step was a gain beyond the noise in every round on 4 CPUs, where
# they are smallest (results/h200x2-runs36; 12 showed them in one of three),
# and a ladder takes about five minutes.
RUN_SPREAD = 0.03
CPU_LIMITED_RUNS = (3, 36)
CPU_LIMITED_STEPS = (("14_batch", "15_lazy"), ("16_thread_domain", "17_op_pool"),
                     ("17_op_pool", "18_more"))


# The rule the counters are counted by (common/counter_rule.h says what each
# number means); a recording carries the one its runs were made under.
COUNTER_RULE_HEADER = ROOT / "common" / "counter_rule.h"
COUNTER_RULE_2_SINCE = "2026-11-25T02:25:12Z"  # doorbells only for posts taken


def todays_counter_rule(root=ROOT):
    text = (pathlib.Path(root) / "common" / "counter_rule.h").read_text()
    return int(re.search(r"kCounterRule = (\d+);", text).group(1))


def counter_rule_of(records):
    """The counter rule of a recording's runs: the one their records carry,
    or for records made before they carried it, the one in force then (3 had
    longest_write_run, 2 began at 19f82de). The oldest where runs differ;
    None without counters."""
    rules = []
    for r in records:
        if not r.get("ok") or "doorbells" not in r:
            continue
        if "counter_rule" in r:
            rules.append(int(r["counter_rule"]))
        elif "longest_write_run" in r:
            rules.append(3)
        else:
            rules.append(2 if r.get("time", "") >= COUNTER_RULE_2_SINCE else 1)
    return min(rules) if rules else None


def is_simulated(provider):
    """Whether a provider is a simulation (simnic), not a real provider."""
    return any(str(provider).startswith(p) for p in SIMULATED_PROVIDERS)


def kind_of(provider):
    return "simulated" if is_simulated(provider) else "measured"


# --- the machine -----------------------------------------------------------

def _read(path):
    try:
        return pathlib.Path(path).read_text()
    except OSError:
        return ""


def cpu_model():
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def memory_gib():
    m = re.search(r"^MemTotal:\s+(\d+) kB", _read("/proc/meminfo"), re.M)
    return int(m.group(1)) / 2**20 if m else 0.0


def os_name():
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)', _read("/etc/os-release"), re.M)
    return m.group(1) if m else platform.system()


def _output(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def gpus():
    if not shutil.which("nvidia-smi"):
        return ""
    names = _output(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()
    if not names:
        return ""
    counts = {}
    for n in names:
        counts[n.strip()] = counts.get(n.strip(), 0) + 1
    return ", ".join(f"{c} x {n}" for n, c in counts.items())


def libfabric_build():
    """fi_info's own version line (e.g. 1.17.0), when fi_info is installed."""
    m = re.search(r"libfabric:\s*(\S+)", _output(["fi_info", "--version"]))
    return m.group(1) if m else ""


def cpu_ranges(cpus):
    """[0, 1, 2, 5] -> "0-2,5"."""
    parts, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            parts.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(parts)


def taskset_prefix():
    """'taskset -c 0-7 ' when this process may use fewer CPUs than are
    online (how a recording on part of a machine was made), else ''."""
    try:
        mine = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return ""
    online = os.cpu_count() or len(mine)
    return f"taskset -c {cpu_ranges(mine)} " if len(mine) < online else ""


def code_version(bin_dir=None):
    """The commit the chapters were built from, and whether the code that
    goes into them had uncommitted changes. Binaries built elsewhere and
    carried over (--bin-dir) name theirs in a COMMIT file beside them."""
    if bin_dir is not None and (pathlib.Path(bin_dir) / "COMMIT").exists():
        commit = (pathlib.Path(bin_dir) / "COMMIT").read_text().strip()
        return f"{commit} (binaries built there, carried in --bin-dir)"
    commit = _output(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    if not commit:
        return "unknown (not a git checkout)"
    dirty = _output(["git", "-C", str(ROOT), "status", "--porcelain", "--", "chapters", "common",
                     "third_party", "WORKSPACE", ".bazelrc"])
    return commit + (" with uncommitted changes to the code" if dirty else "")


def previous_recording(out_dir):
    """The date of the results already in out_dir, or None."""
    try:
        return json.loads((out_dir / "results.json").read_text())["meta"]["date"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def machine_slug():
    model = cpu_model().lower()
    model = re.sub(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|@.*$|\b\d+-core\b", " ", model)
    words = re.sub(r"[^a-z0-9]+", " ", model).split()[:4] or ["cpu"]
    return f"{cpu_count()}core-" + "-".join(words)


def describe_machine():
    d = {
        "cpu": cpu_model(),
        "cpus": cpu_count(),
        "memory_gib": round(memory_gib(), 1),
        "kernel": platform.release(),
        "os": os_name(),
    }
    g = gpus()
    if g:
        d["gpus"] = g
    return d


def cpu_snapshot():
    """(busy CPU seconds of the whole machine, CPU seconds of this process
    and its finished children). Busy counts user, nice and system time, not
    interrupts; None where /proc/stat is missing."""
    fields = _read("/proc/stat").split("\n", 1)[0].split()
    if len(fields) < 4 or fields[0] != "cpu":
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = sum(int(x) for x in fields[1:4]) / hz
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system


def other_cpu_share(before, after, seconds):
    if before is None or after is None or seconds <= 0:
        return None
    others = (after[0] - before[0]) - (after[1] - before[1])
    return max(0.0, others / (seconds * cpu_count()))


# --- running ---------------------------------------------------------------

class ProgressFilter(io.TextIOBase):
    """Takes run_chapter's echo and shows one live status line instead.

    On a terminal the server's latest progress line rewrites itself in place;
    into a file or pipe only compare's own lines come through (--verbose lets
    everything through).
    """

    def __init__(self, out, verbose):
        self.out = out
        self.verbose = verbose
        self.tty = out.isatty()
        self.prefix = ""
        self.buffer = ""
        self.shown = False

    def writable(self):
        return True

    def write(self, s):
        self.buffer += s
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            self._line(line)
        return len(s)

    def _line(self, line):
        if self.verbose:
            self.out.write(line + "\n")
        elif self.tty and line.startswith("  server| ["):
            status = f"{self.prefix} {line[len('  server| '):]}"
            width = shutil.get_terminal_size((120, 20)).columns - 1
            self.out.write("\r\033[K" + status[:width])
            self.shown = True
        self.out.flush()

    def clear(self):
        if self.shown:
            self.out.write("\r\033[K")
            self.shown = False
        self.out.flush()


def say(filt, text):
    filt.clear()
    print(text, file=filt.out, flush=True)


def stage_binaries(chapter_list, dest, census=False):
    """Copies the freshly built binaries aside, so that a rebuild in the same
    workspace (another terminal, a test run) cannot swap them mid-run."""
    for chapter in chapter_list:
        (dest / chapter).mkdir(parents=True)
        for name in ("server", "client") + (("server_atomic_census",) if census else ()):
            src = ROOT / "bazel-bin" / "chapters" / chapter / name
            if not src.exists():
                sys.exit(f"compare: {src} not found after the build")
            shutil.copy2(src, dest / chapter / name)


def run_all(args, chapter_list):
    records = []
    filt = ProgressFilter(sys.stdout, args.verbose)
    started = time.monotonic()
    for i, chapter in enumerate(chapter_list, 1):
        counted, j, extra = 0, 0, 0
        while counted < args.runs:
            j += 1
            if j > args.runs:
                # A flagged run (simnic) counts nowhere: another takes its
                # place, up to --extra-runs of them per chapter.
                if extra >= args.extra_runs:
                    break
                extra += 1
            # A replacement run says so: "run 4/3" read as a count gone wrong.
            tag = (f"[{i}/{len(chapter_list)} {chapter} run {j}/{args.runs}]" if j <= args.runs
                   else f"[{i}/{len(chapter_list)} {chapter} extra run {extra}/"
                        f"{args.extra_runs}, for a flagged one]")
            filt.prefix = tag
            if filt.tty and not args.verbose:
                filt.out.write("\r\033[K" + f"{tag} starting")
                filt.out.flush()
                filt.shown = True
            t0 = time.monotonic()
            try:
                with contextlib.redirect_stdout(filt):
                    record = run_chapter.run_once(args, chapter, echo=True)
            except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                record = {"chapter": chapter, "ok": False, "error": str(e)}
                say(filt, f"{tag} FAILED after {time.monotonic() - t0:.1f} s: {first}")
            else:
                if record.get("ok"):
                    flagged = (f"  FLAGGED ({', '.join(record['flags'])}): not counted"
                               if record.get("flags") else "")
                    say(filt, f"{tag} {record['gbps']:8.3f} Gbps {record['mops']:7.4f} Mops/s "
                              f"({record['seconds']:.2f} s timed, {time.monotonic() - t0:.1f} s "
                              f"in all){flagged}")
                else:
                    say(filt, f"{tag} FAILED: {record.get('error', 'no error given')}")
            record["run"] = j
            records.append(record)
            if not record.get("ok") or not record.get("flags"):
                counted += 1  # a failed run counts too: it is not retried
    filt.clear()
    return records, time.monotonic() - started


def run_census(args, chapter_list):
    """--atomic-census: one run of each chapter's census build after the
    timed runs (harness/atomic_census.cc): its atomic operations counted,
    its rate not kept (the count slows every atomic operation)."""
    census_args = argparse.Namespace(**vars(args))
    census_args.atomic_census = True
    records = []
    for chapter in chapter_list:
        try:
            record = run_chapter.run_once(census_args, chapter, echo=False)
        except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as e:
            record = {"chapter": chapter, "ok": False, "error": str(e)}
        writes = record.get("writes") or 0
        got = ", ".join(f"{key} {record[key] / writes:.3f}" for key in CENSUS_KEYS
                        if key in record and writes)
        print(f"[census {chapter}] {got + ' a WRITE' if got else 'FAILED: no census'}",
              flush=True)
        records.append(record)
    return records


# --- tables ----------------------------------------------------------------

def counter_medians(ok_records):
    """The medians of the counters over the successful runs that report
    them: {column: value}; a counter no run reports is left out."""
    out = {}
    for column, key, per_write, _, _ in COUNTERS:
        values = []
        for r in ok_records:
            v = r.get(key)
            if v is None:
                continue  # an older record, or a kernel that does not report it
            if per_write:
                if not r.get("writes"):
                    continue
                v = v / r["writes"]
            values.append(float(v))
        if values:
            out[column] = statistics.median(values)
    return out


# The census build's counts (run_chapter.py --atomic-census), kept per
# WRITE as row["<key>_per_write"]: (key, heading in results.md).
CENSUS_KEYS = {"atomic_rmw": "atomic read-modify-writes / WRITE",
               "atomic_stores": "atomic stores / WRITE",
               "cross_thread_atomic_writes": "... to an atomic another thread wrote last / WRITE"}


def census_per_write(census, chapter):
    """{row column: count per WRITE} of the chapter's census run; {} when
    there is none."""
    for r in census or ():
        if r.get("chapter") == chapter and r.get("ok") and r.get("writes"):
            return {f"{key}_per_write": r[key] / r["writes"] for key in CENSUS_KEYS if key in r}
    return {}


def census_table(rows):
    """One row per chapter with a census: its atomic operations per WRITE."""
    lines = ["| chapter | " + " | ".join(CENSUS_KEYS.values()) + " |",
             "|---|" + "---:|" * len(CENSUS_KEYS)]
    for r in rows:
        if any(f"{key}_per_write" in r for key in CENSUS_KEYS):
            cells = [fmt_counter(r.get(f"{key}_per_write"), 3) for key in CENSUS_KEYS]
            lines.append(f"| {r['chapter']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summarize(records, chapter_list, census=None):
    rows = []
    prev_gbps = None
    for chapter in chapter_list:
        mine = [r for r in records if r.get("chapter") == chapter]
        # A flagged run (simnic: preempted writers, an engine behind the
        # line rate) is kept in results.json but counts nowhere below.
        flagged = [r for r in mine if r.get("ok") and r.get("flags")]
        ok = [r for r in mine if r.get("ok") and not r.get("flags")]
        flag_names = sorted({f for r in flagged for f in r["flags"]})
        row = {"chapter": chapter, "idea": series.idea(chapter) if chapter in series.ORDER
               else "", "runs": len(mine), "runs_ok": len(ok), "runs_flagged": len(flagged),
               "flags": ", ".join(flag_names),
               "series_p5_gbps": series.series_gbps(chapter) if chapter in series.CHAPTERS
               else "",
               "series_p5_mops": series.series_mops(chapter) if chapter in series.CHAPTERS
               else ""}
        if ok:
            g = [r["gbps"] for r in ok]
            row.update(gbps_median=statistics.median(g), gbps_min=min(g), gbps_max=max(g),
                       mops_median=statistics.median(r["mops"] for r in ok),
                       seconds_median=statistics.median(r["seconds"] for r in ok))
            row.update(counter_medians(ok))
            if prev_gbps:
                row["vs_previous"] = row["gbps_median"] / prev_gbps - 1
            prev_gbps = row["gbps_median"]
        else:
            prev_gbps = None
        row.update(census_per_write(census, chapter))
        rows.append(row)
    return rows


def fmt_change(x):
    return "" if x in (None, "") else f"{100 * float(x):+.1f}%"


def markdown_table(rows):
    lines = ["| chapter | idea | Gbps (median) | Mops/s (median) | Gbps min-max | runs "
             "| vs previous | series on p5, Gbps | series on p5, Mops/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("gbps_median") is None:
            nums = ("not counted | | " if r.get("runs_flagged") else "failed | | ")
        else:
            nums = (f"{r['gbps_median']:.3f} | {r['mops_median']:.4f} | "
                    f"{r['gbps_min']:.3f}-{r['gbps_max']:.3f}")
        runs = f"{r['runs_ok']}" if r["runs_ok"] == r["runs"] else f"{r['runs_ok']} of {r['runs']}"
        if r.get("runs_flagged"):
            runs += f" ({r['runs_flagged']} flagged: {r['flags']}; not counted)"
        p5 = f"{r['series_p5_gbps']:.3f}" if r.get("series_p5_gbps", "") != "" else ""
        p5 += f" | {r['series_p5_mops']:.3f}" if r.get("series_p5_mops", "") != "" else " | "
        lines.append(f"| {r['chapter']} | {r['idea']} | {nums} | {runs} | "
                     f"{fmt_change(r.get('vs_previous'))} | {p5} |")
    return "\n".join(lines)


def fmt_counter(value, digits):
    return "" if value in (None, "") else f"{float(value):.{digits}f}"


def counters_table(rows):
    """One row per chapter: the counters' medians over the runs."""
    lines = ["| chapter | " + " | ".join(c[3] for c in COUNTERS) + " |",
             "|---|" + "---:|" * len(COUNTERS)]
    for r in rows:
        cells = [fmt_counter(r.get(c[0]), c[4]) for c in COUNTERS]
        lines.append(f"| {r['chapter']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def t_975(df):
    """The 97.5% quantile of Student's t with `df` degrees of freedom (a
    table, interpolated; 1.96 beyond it)."""
    if df >= 120:
        return 1.96 if df > 1000 else T_975[120]
    keys = sorted(T_975)
    df = max(df, 1)
    for lo, hi in zip(keys, keys[1:]):
        if lo <= df <= hi:
            return T_975[lo] + (T_975[hi] - T_975[lo]) * (df - lo) / (hi - lo)
    return T_975[1]


def log_rates(records, chapter):
    """The natural log of the Gbps of each counted run of `chapter`."""
    return [math.log(r["gbps"]) for r in records
            if r.get("chapter") == chapter and r.get("ok") and not r.get("flags")
            and r.get("gbps", 0) > 0]


def step_between(a, b):
    """(step, uncertainty) from runs' log rates `a` (before) and `b`: the
    ratio of geometric means and the half-width of the 95% interval of
    its log (Welch); uncertainty None with fewer than two runs a side."""
    step = math.exp(statistics.fmean(b) - statistics.fmean(a))
    if len(a) < 2 or len(b) < 2:
        return step, None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se2 = va + vb
    if se2 == 0:
        return step, 0.0
    df = se2 ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return step, t_975(df) * math.sqrt(se2)


def add_steps(rows, records):
    """Each chapter's step from the one before (step_between) and a
    verdict: gain or LOSS when the interval leaves out no change, else
    inside the noise."""
    for before, row in zip(rows, rows[1:]):
        a, b = log_rates(records, before["chapter"]), log_rates(records, row["chapter"])
        if not a or not b:
            continue
        step, noise = step_between(a, b)
        row["step"] = step
        row["step_noise"] = noise
        row["step_verdict"] = step_verdict(step, noise)


def step_verdict(step, noise):
    """gain or LOSS when the interval (step_between) leaves out no change,
    else inside the noise."""
    if noise is None:
        return "noise unknown (one run)"
    if abs(math.log(step)) <= noise:
        return "inside the noise"
    return "gain" if step > 1 else "LOSS"


def runs_for_steps(prediction, steps=CPU_LIMITED_STEPS, spread=RUN_SPREAD,
                   limits=CPU_LIMITED_RUNS):
    """--cpu-limited's runs per chapter, and the step that set it: the
    fewest runs n for which the smallest predicted step among `steps` is
    twice the expected uncertainty t * spread * sqrt(2 / n) (t for
    2n - 2 degrees of freedom), between `limits`."""
    lo, hi = limits
    sizes = [(abs(math.log(prediction[b]["mops"] / prediction[a]["mops"])), a, b)
             for a, b in steps if a in (prediction or {}) and b in (prediction or {})]
    if not sizes:
        return hi, None
    size, a, b = min(sizes)
    n = lo
    while n < hi and 2 * t_975(2 * n - 2) * spread * math.sqrt(2 / n) > size:
        n += 1
    return n, (a, b, math.exp(size))


def steps_table(rows):
    lines = ["| step | rate ratio | uncertainty (95%, Welch) | verdict |", "|---|---:|---:|---|"]
    for before, row in zip(rows, rows[1:]):
        if "step" not in row:
            continue
        noise = "" if row.get("step_noise") is None else f"±{row['step_noise']:.3f}"
        lines.append(f"| {series.number(before['chapter'])} -> {series.number(row['chapter'])} | "
                     f"x{row['step']:.3f} | {noise} | {row['step_verdict']} |")
    return "\n".join(lines)


def add_predictions(rows, prediction):
    for row in rows:
        p = (prediction or {}).get(row["chapter"])
        if not p:
            continue
        row["predicted_mops"] = p["mops"]
        if row.get("mops_median"):
            row["prediction_error"] = p["mops"] / row["mops_median"] - 1


def predictions_table(rows):
    lines = ["| chapter | predicted M WRITEs/s (before the runs) | measured (median) | "
             "predicted / measured - 1 |", "|---|---:|---:|---:|"]
    for row in rows:
        if row.get("predicted_mops") is None:
            continue
        measured = "" if row.get("mops_median") is None else f"{row['mops_median']:.3f}"
        error = fmt_change(row.get("prediction_error"))
        lines.append(f"| {row['chapter']} | {row['predicted_mops']:.3f} | {measured} | {error} |")
    return "\n".join(lines)


def measure_primitives(args):
    """simnic_bench --primitives on this machine, under this process's
    affinity: what the model's predictions need. None when no bench."""
    candidates = [ROOT / "bazel-bin" / "simnic"]
    if args.bin_dir:
        candidates.insert(0, pathlib.Path(args.bin_dir) / "simnic")
    for folder in candidates:
        bench = folder / "simnic_bench"
        if bench.exists() and (folder / "libsimnic-fi.so").exists():
            env = dict(os.environ, FI_PROVIDER_PATH=str(folder.resolve()))
            done = subprocess.run([str(bench), "--primitives"], capture_output=True, text=True,
                                  timeout=120, env=env)
            if done.returncode == 0:
                return simnic_fit.read_primitives(done.stdout)
            print(f"compare: {bench} --primitives failed: {done.stderr.strip()}",
                  file=sys.stderr)
            return None
    return None


def simulated_note(provider):
    return (f"**Simulated**: `{provider}` is a simulated NIC, not a libfabric provider on real "
            "hardware. Every number in this folder comes from the simulation; none is a "
            "measurement of a provider, and none belongs in a column beside measured ones.")


def layout_text(meta):
    s = meta["settings"]
    return (f"{s['gpus']} GPU(s) x {s['nics_per_gpu']} NIC(s), {s['memory']} memory, "
            f"page {s['page_size']} B, {s['pages']} pages, repeat {s['repeat']} "
            f"({2 * s['gpus'] * s['pages'] * s['repeat']} WRITEs a run)")


def census_text(rows):
    """results.md's census section, where the recording ran one."""
    if not any(f"{key}_per_write" in r for r in rows for key in CENSUS_KEYS):
        return ""
    return f"""
The atomic census (`--atomic-census`): one more run of each chapter's census
build (harness/atomic_census.cc), its server.cc's atomic operations counted;
that run's rate is not kept. The last column depends on how the threads
interleaved.

{census_table(rows)}
"""


def write_markdown(path, meta, rows):
    m = meta["machine"]
    s = meta["settings"]
    # Older recordings named fi_info's version; newer ones what the chapters
    # ran on: the full version and the file the loader took.
    loaded = meta.get("libfabric_path")
    lib = meta["libfabric"] + (f" ({'' if loaded else 'fi_info: '}{meta['libfabric_build']})"
                               if meta.get("libfabric_build") else "")
    if loaded:
        lib += f", loaded from `{loaded}`"
    extra_text = (f"; a flagged run is kept in results.json, counts nowhere and is replaced "
                  f"by another, up to {s['extra_runs']} per chapter"
                  if s.get("extra_runs") else "")
    other = ("unknown" if meta.get("other_cpu") is None else
             f"{100 * meta['other_cpu']:.1f}% of the machine's CPU time")
    machine = (f"{m['cpu']}, {m['cpus']} CPUs, {m['memory_gib']} GiB, {m['os']}, "
               f"Linux {m['kernel']}" + (f", {m['gpus']}" if m.get("gpus") else ""))
    simulated = is_simulated(s["provider"])
    title = (f"# {meta['name']}: the chapters over `{s['provider']}` (SIMULATED), "
             f"{s['memory']} memory" if simulated else
             f"# {meta['name']}: the chapters over `{s['provider']}`, {s['memory']} memory")
    note = f"\n{simulated_note(s['provider'])}\n" if simulated else ""
    prediction_text = ""
    if meta.get("prediction"):
        p = meta.get("primitives") or {}
        prediction_text = f"""
The frozen model's prediction (simnic/costs.h, tools/simnic_fit.py --predict),
made before the runs from this machine's primitives alone (simnic_bench
--primitives: a post {p.get('post_ns', 0):.0f} ns, a CQ read {p.get('cq_read_ns', 0):.0f} ns,
a cache-line handoff {p.get('line_ns', 0):.0f} ns), beside the measured medians:

{predictions_table(rows)}
"""
    if meta.get("note"):
        note += f"\n{meta['note']}\n"
    text = f"""{title}
{note}
Recorded by `tools/compare.py`; every number below comes from its runs.

- machine: {machine}
- libfabric: {lib}
- code: {meta.get('code', 'unknown')}
- counter rule: {meta.get('counter_rule') or 'no counters'} (common/counter_rule.h)
- provider: {s['provider']}; memory: {s['memory']}
- request: {layout_text(meta)}
- runs: {s['runs']} per chapter, median kept{extra_text}
- date: {meta['date']} (took {meta['seconds']:.0f} s)
- other processes' CPU use during the runs: {other}
- command: `{meta['command']}`

{markdown_table(rows)}

Gbps and Mops/s are the server's, timed from the first WRITE after warmup to
the last completion. "vs previous" compares the median Gbps with the chapter
before. The last two columns are the numbers {series.SERIES_SOURCE} (8 GPUs,
32 EFA NICs, 64 KiB pages; Gbps and millions of WRITEs a second), quoted
for reference, not measured here; chapters 16 on are ours, with no series
number.

Counters of the writer threads' whole run, warmup included (docs/counters.md),
medians over the runs: per WRITE for the calls, EAGAINs and
allocations and for the CPU time inside and outside provider calls; counts
for migrations and involuntary context switches. An empty cell: no run
reported that counter.

{counters_table(rows)}

Each step: the ratio of the chapter's geometric mean rate over its runs to
the one before, with its uncertainty, the half-width of the 95% interval of
the ratio's log by Welch's t-test on the two chapters' runs (it shrinks as
runs are added). A step whose interval leaves out no change is a gain or a
LOSS; any other is inside the noise.

{steps_table(rows)}
{prediction_text}{census_text(rows)}
![plot](plot.png)
"""
    path.write_text(text)


def write_csv(path, meta, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, lineterminator="\n")
        w.writeheader()
        s = meta["settings"]
        for r in rows:
            out = {k: "" if r.get(k) is None else r[k] for k in CSV_FIELDS}
            for k in ("gbps_median", "gbps_min", "gbps_max"):
                if out[k] != "":
                    out[k] = f"{out[k]:.3f}"
            for k in ("mops_median", "vs_previous", "seconds_median", "step", "step_noise",
                      "predicted_mops", "prediction_error"):
                if out[k] != "":
                    out[k] = f"{out[k]:.4f}"
            for column, _, _, _, digits in COUNTERS:
                if out[column] != "":
                    out[column] = f"{out[column]:.{max(digits, 4)}f}"
            out.update(provider=s["provider"], memory=s["memory"], gpus=s["gpus"],
                       nics_per_gpu=s["nics_per_gpu"], page_size=s["page_size"],
                       pages=s["pages"], repeat=s["repeat"], libfabric=meta["libfabric"],
                       libfabric_path=meta.get("libfabric_path", ""),
                       machine=meta["machine_slug"], kind=kind_of(s["provider"]),
                       counter_rule=meta.get("counter_rule") or "")
            w.writerow(out)


# --- the plot --------------------------------------------------------------

def _import_pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot(out_dir):
    """Draws plot.png from results.json. Returns True when it did."""
    try:
        plt = _import_pyplot()
    except ImportError:
        # Debian's python3-matplotlib belongs to /usr/bin/python3; a python3
        # from elsewhere (pyenv, a venv) may not see it: try that one.
        system = "/usr/bin/python3"
        if (os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system)
                and not os.environ.get("COMPARE_PLOT_REEXEC")):
            env = dict(os.environ, COMPARE_PLOT_REEXEC="1")
            ret = subprocess.run([system, __file__, "--plot-only", str(out_dir)], env=env)
            return ret.returncode == 0
        print("compare: no matplotlib, so no plot.png (bash tools/setup.sh installs "
              "python3-matplotlib)", file=sys.stderr)
        return False

    data = json.loads((out_dir / "results.json").read_text())
    meta, rows = data["meta"], data["rows"]
    fig = plt.figure(figsize=(14, 6.4))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 1])
    ax = fig.add_subplot(grid[0, 0])
    mx = fig.add_subplot(grid[1, 0], sharex=ax)
    bx = fig.add_subplot(grid[:, 1])

    labels = [f"{series.number(r['chapter'])}\n{series.short_name(r['chapter'])}" for r in rows]
    xs = list(range(len(rows)))
    s = meta["settings"]
    for axis, key, unit, color, digits in ((ax, "gbps", "Gbps", "#4C72B0", 2),
                                            (mx, "mops", "Mops/s", "#DD8452", 4)):
        med = [r.get(f"{key}_median") or 0 for r in rows]
        err = None
        if key == "gbps":  # the spread of the runs
            err = [[m - (r.get("gbps_min") or 0) for m, r in zip(med, rows)],
                   [(r.get("gbps_max") or 0) - m for m, r in zip(med, rows)]]
        bars = axis.bar(xs, med, color=color, yerr=err, capsize=3)
        top = max(med + [1e-9])
        for b, r in zip(bars, rows):
            value = r.get(f"{key}_median")
            y = max(b.get_height(), r.get("gbps_max") or 0) if key == "gbps" else b.get_height()
            axis.annotate("failed" if value is None else f"{value:.{digits}f}",
                          (b.get_x() + b.get_width() / 2, y), xytext=(0, 3),
                          textcoords="offset points", ha="center", fontsize=8)
        axis.set_ylim(0, top * 1.3)
        axis.set_ylabel(unit)
    sim = " (SIMULATED NIC: not a measurement)" if is_simulated(s["provider"]) else ""
    ax.set_title(f"This machine: {meta['machine_slug']}, {s['provider']}{sim}, "
                 f"{s['memory']} memory, {s['gpus']} GPU(s) x {s['nics_per_gpu']} NIC(s)\n"
                 f"page {s['page_size']} B, {s['pages']} pages, repeat {s['repeat']}; "
                 f"median of {s['runs']} runs (Gbps bars: min-max)", fontsize=10)
    ax.tick_params(labelbottom=False)
    mx.set_xticks(xs, labels, fontsize=8)

    chapters = list(series.CHAPTERS)  # the series' own: ours (16+) have no series number
    p5 = [series.series_gbps(c) for c in chapters]
    pbars = bx.bar(range(len(chapters)), p5, color="#55A868")
    for b, c in zip(pbars, chapters):
        bx.annotate(f"{series.series_gbps(c):.0f}\n{100 * series.series_share(c):.1f}%",
                    (b.get_x() + b.get_width() / 2, b.get_height()), xytext=(0, 3),
                    textcoords="offset points", ha="center", fontsize=8)
    bx.axhline(series.SERIES_LINK_GBPS, color="gray", linestyle="--", linewidth=1)
    bx.text(-0.4, series.SERIES_LINK_GBPS * 1.02, "3200 Gbps = 32 EFA NICs x 100 Gbps",
            fontsize=8, color="gray")
    bx.set_xticks(range(len(chapters)),
                  [f"{series.number(c)}\n{series.short_name(c)}" for c in chapters], fontsize=8)
    bx.set_ylim(0, series.SERIES_LINK_GBPS * 1.2)
    bx.set_ylabel("Gbps")
    bx.set_title("The series' ladder, recorded by the series on a p5.48xlarge\n"
                 "8 H100, 32 EFA NICs, 64 KiB pages (\"Harnessing 3200Gbps Network\")",
                 fontsize=10)
    fig.suptitle(f"libfabric tutorial, chapters {series.number(rows[0]['chapter'])}-"
                 f"{series.number(rows[-1]['chapter'])} ({meta['date'][:10]})", fontsize=11)
    fig.tight_layout()
    fig.savefig(out_dir / "plot.png", dpi=110)
    plt.close(fig)
    return True


def redraw(out_dir):
    """Tables and plot again from the raw records (after a change to the
    tables' format or to the chapters' one-line ideas); no number is re-measured."""
    path = out_dir / "results.json"
    data = json.loads(path.read_text())
    meta, records = data["meta"], data["records"]
    meta["counter_rule"] = counter_rule_of(records)
    rows = summarize(records, meta["settings"]["chapters"], data.get("census"))
    add_steps(rows, records)
    add_predictions(rows, meta.get("prediction"))
    data["rows"] = rows
    path.write_text(json.dumps(data, indent=1) + "\n")
    write_csv(out_dir / "results.csv", meta, rows)
    write_markdown(out_dir / "results.md", meta, rows)
    return 0 if plot(out_dir) else 1


# --- recording -------------------------------------------------------------

def shown(path):
    """path relative to the checkout where it lies inside it."""
    path = pathlib.Path(path)
    try:
        return path.resolve().relative_to(ROOT.resolve())
    except ValueError:
        return path


def is_recorded(path):
    """Whether path lies under results/ (tracked files)."""
    return pathlib.Path(path).resolve().is_relative_to(RECORDED.resolve())


def refresh_docs():
    """Regenerates the docs pages' result tables from results/ (what
    `bazel test //docs:all` checks). Returns True when it worked."""
    return subprocess.run([sys.executable, str(ROOT / "maint" / "docs_diff.py"), "--write"],
                          cwd=ROOT, stdout=subprocess.DEVNULL).returncode == 0


def say_replaced(out_dir, replaced):
    if not replaced:
        return
    hint = ""
    if is_recorded(out_dir):
        # In a checkout, git still has the recorded folder.
        rel = shown(out_dir)
        hint = f" (`git diff -- {rel}` compares, `git checkout -- {rel}` restores them)"
    print(f"compare: replaced the results recorded there on {replaced}{hint}")


def say_how_to_record(out_dir):
    print(f"compare: the new results are in {shown(out_dir)}/ (git ignores out/: the checkout "
          "is unchanged)")
    print(f"compare: to record them in results/ and the docs pages' tables: "
          f"python3 tools/compare.py --record-from {shown(out_dir)}")


def record_from(src, dest, docs):
    """Copies a folder compare.py made (results.json and the files beside it)
    into dest under results/, then refreshes the docs pages' tables."""
    replaced = previous_recording(dest)
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in RESULT_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, dest / name)
            copied.append(name)
        elif (dest / name).exists():
            (dest / name).unlink()  # a stale plot must not stand beside new numbers
    print(f"compare: recorded {', '.join(copied)} from {shown(src)} in {shown(dest)}")
    say_replaced(dest, replaced)
    if docs:
        if refresh_docs():
            print("compare: refreshed the result tables in docs/ and results/README.md "
                  "(maint/docs_diff.py --write)")
        else:
            print("compare: maint/docs_diff.py --write failed; run it by hand", file=sys.stderr)
            return 1
    print("compare: review with `git status` and `git diff`, then commit them")
    return 0


# --- main ------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Layout and request flags are tools/run_chapter.py's.")
    run_chapter.add_run_flags(parser)
    parser.add_argument("--chapters", nargs="+", default=None, choices=run_chapter.chapters(),
                        metavar="CHAPTER", help="a subset, in order (default: all)")
    parser.add_argument("--runs", type=int, default=None,
                        help="runs per chapter; the median is kept (default 3; with "
                             "--cpu-limited, as many as the smallest predicted step needs, "
                             f"{CPU_LIMITED_RUNS[0]} to {CPU_LIMITED_RUNS[1]})")
    parser.add_argument("--extra-runs", type=int, default=None,
                        help="runs that may replace flagged ones (simnic: preempted, engine "
                             "behind), per chapter (default: 2 over simnic, else 0)")
    parser.add_argument("--machine", default=None,
                        help="machine name in the folder name (default: cores and CPU model)")
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="output folder (default: out/results/<name>, git-ignored; "
                             "results/<name> with --record; a folder under results/ needs "
                             "--record)")
    parser.add_argument("--record", action="store_true",
                        help="record: write into results/<name>/ (tracked) and refresh the docs "
                             "pages' result tables; without it nothing tracked is written")
    parser.add_argument("--record-from", type=pathlib.Path, default=None, metavar="DIR",
                        help="record a folder made earlier (e.g. out/results/<name>) into "
                             "results/<its name>/ (or --out) and refresh the docs pages' tables; "
                             "measures nothing")
    parser.add_argument("--verbose", action="store_true",
                        help="show every line the server and client print")
    parser.add_argument("--no-docs", action="store_true",
                        help="with --record or --record-from: leave the docs pages' result "
                             "tables alone")
    parser.add_argument("--redraw", type=pathlib.Path, default=None, metavar="DIR",
                        help="rewrite DIR's results.md, results.csv and plot.png from the runs "
                             "recorded in DIR/results.json, and exit")
    parser.add_argument("--cpu-limited", action="store_true",
                        help=f"over simnic: {CPU_LIMITED_PAGE_SIZE}-byte pages, where the line "
                             "leaves every chapter limited by its writers' CPU, and chapters "
                             f"{CPU_LIMITED_CHAPTERS[0][:2]}-{CPU_LIMITED_CHAPTERS[-1][:2]} "
                             "(whose lessons need it) unless --chapters says otherwise")
    parser.add_argument("--primitives", type=pathlib.Path, default=None, metavar="FILE",
                        help="over simnic: this machine's primitives (simnic_bench --primitives "
                             "output) for the predictions; default: run simnic_bench here")
    parser.add_argument("--atomic-census", action="store_true",
                        help="after the timed runs, one run of each chapter's census build "
                        "(:server_atomic_census; in --bin-dir too): its atomic operations per "
                        "WRITE in results.md and results.json (a counting run, not timed)")
    parser.add_argument("--plot-only", type=pathlib.Path, default=None, metavar="DIR",
                        help="redraw DIR/plot.png from DIR/results.json and exit")
    args = parser.parse_args()

    if args.plot_only:
        return 0 if plot(args.plot_only) else 1
    if args.redraw:
        return redraw(args.redraw)
    if args.record_from:
        src = args.record_from
        try:
            name = json.loads((src / "results.json").read_text())["meta"]["name"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            parser.error(f"--record-from: {src}/results.json is not a compare.py folder ({e})")
        dest = args.out or RECORDED / name
        if not is_recorded(dest):
            parser.error(f"--record-from: {dest} is not under results/")
        try:
            provider = json.loads((src / "results.json").read_text())["meta"]["settings"][
                "provider"]
        except (OSError, ValueError, KeyError, TypeError):
            provider = ""
        if is_simulated(provider) and "simnic" not in dest.name:
            parser.error(f"--record-from: {src} holds simulated numbers ({provider}): the "
                         f"folder's name must say so (contain 'simnic'), not {dest.name}")
        if dest.resolve() == src.resolve():
            parser.error(f"--record-from: {src} is already recorded there")
        return record_from(src, dest, not args.no_docs)
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.extra_runs is None:
        args.extra_runs = 2 if args.provider == "simnic" else 0
    if args.cpu_limited:
        if args.provider != "simnic":
            parser.error("--cpu-limited is for --provider simnic")
        if args.page_size is None:
            args.page_size = CPU_LIMITED_PAGE_SIZE
        if not args.chapters:
            args.chapters = list(CPU_LIMITED_CHAPTERS)
    # Over simnic: 256-byte pages and the largest layout that fits this
    # machine's CPUs (printed), unless given.
    run_chapter.resolve_defaults(args, say=lambda text: print(f"compare: {text}", flush=True))
    chapter_list = args.chapters or run_chapter.chapters()
    slug = args.machine or machine_slug()
    name = f"{slug}-{args.provider}-{args.memory}"
    if (args.gpus, args.nics_per_gpu) != DEFAULT_LAYOUT:
        name += f"-{args.gpus}x{args.nics_per_gpu}"
    if args.page_size != DEFAULT_PAGE_SIZE:
        name += f"-page{args.page_size}"
    out_dir = args.out or (RECORDED if args.record else SCRATCH) / name
    if is_simulated(args.provider) and "simnic" not in out_dir.name:
        parser.error(f"--out {shown(out_dir)}: a run over {args.provider} is simulated, and the "
                     "folder's name must say so: name it with 'simnic' in it")
    if is_recorded(out_dir) and not args.record:
        parser.error(f"--out {shown(out_dir)}: results/ holds the recorded (tracked) results; "
                     "add --record to write there, or leave --out out (out/results/)")
    command = taskset_prefix() + "python3 tools/compare.py" + (
        "" if len(sys.argv) < 2 else " " + shlex.join(sys.argv[1:]))
    runs_text = ("runs set below" if args.runs is None and args.cpu_limited
                 else f"{args.runs or 3} run(s)")
    print(f"compare: {len(chapter_list)} chapter(s) x {runs_text} over {args.provider}, "
          f"{args.memory} memory, {args.gpus} GPU(s) x {args.nics_per_gpu} NIC(s); "
          f"results go to {shown(out_dir)}",
          flush=True)

    code = code_version(args.bin_dir)  # before the build: what the binaries are built from
    primitives = prediction = None
    if is_simulated(args.provider):
        # The frozen model's prediction, from this machine's primitives,
        # before any chapter runs.
        if args.primitives:
            primitives = simnic_fit.read_primitives(args.primitives.read_text())
        else:
            primitives = measure_primitives(args)
        if primitives:
            prediction = simnic_fit.predict_ladder(chapter_list, primitives, args.gpus,
                                                   args.nics_per_gpu, args.page_size,
                                                   args.pages, args.repeat)
            print(f"compare: this machine's primitives: post {primitives['post_ns']:.0f} ns "
                  f"({primitives['post_over_ns']:+.0f} beyond its charges), CQ read "
                  f"{primitives['cq_read_ns']:.0f} ns ({primitives['cq_read_over_ns']:+.0f}), "
                  f"a line handoff {primitives['line_ns']:.0f} ns", flush=True)
            print("compare: the frozen model predicts (SIMULATED, before the runs): " +
                  ", ".join(f"{c} {p['mops']:.3f}" for c, p in prediction.items()) +
                  " M WRITEs/s", flush=True)
        else:
            print("compare: no simnic_bench to measure this machine's primitives: no "
                  "predictions (bazel build //simnic:simnic_bench)", flush=True)
    if args.runs is None:
        args.runs = 3
        if args.cpu_limited:
            args.runs, smallest = runs_for_steps(prediction)
            if smallest:
                a, b, size = smallest
                print(f"compare: {args.runs} runs per chapter: the smallest predicted step, "
                      f"{series.number(a)} -> {series.number(b)} x{size:.3f}, is then twice "
                      f"its expected uncertainty (one run's spread {RUN_SPREAD})"
                      + (" or the most runs allowed" if args.runs == CPU_LIMITED_RUNS[1]
                         else ""), flush=True)
            else:
                print(f"compare: {args.runs} runs per chapter (no prediction to size them by)",
                      flush=True)
    with tempfile.TemporaryDirectory(prefix="compare-bin-") as staged:
        if not args.bin_dir:
            if not args.no_build:
                if not shutil.which("bazel"):
                    sys.exit("compare: no bazel here: run `bash tools/setup.sh`, or pass "
                             "--bin-dir with binaries built elsewhere")
                print("compare: building the chapters (bazel build)", flush=True)
                try:
                    run_chapter.build(chapter_list)
                    if args.atomic_census:
                        run_chapter.build(chapter_list, "server_atomic_census")
                except subprocess.CalledProcessError:
                    sys.exit("compare: the build failed (see above)")
            stage_binaries(chapter_list, pathlib.Path(staged), args.atomic_census)
            args.bin_dir = pathlib.Path(staged)
        cpu_before = cpu_snapshot()
        records, seconds = run_all(args, chapter_list)
        other_cpu = other_cpu_share(cpu_before, cpu_snapshot(), seconds)
        census = run_census(args, chapter_list) if args.atomic_census else None

    ok = [r for r in records if r.get("ok")]
    provider = args.provider if args.provider != "auto" or not ok else ok[0]["provider"]
    memory = args.memory if args.memory != "auto" or not ok else ok[0]["memory"]
    meta = {
        "name": out_dir.name,
        "machine_slug": slug,
        "machine": describe_machine(),
        "libfabric": ok[0]["libfabric"] if ok else "",
        # The libfabric the chapters ran on, as they report it (the one the
        # loader picked: LIBFABRIC_PREFIX's rpath, LD_LIBRARY_PATH), not the
        # fi_info on PATH; records of older binaries lack it.
        "libfabric_build": (ok[0].get("libfabric_version") if ok else "") or libfabric_build(),
        "libfabric_path": ok[0].get("libfabric_path", "") if ok else "",
        "code": code,
        "settings": {"provider": provider, "memory": memory, "gpus": args.gpus,
                     "nics_per_gpu": args.nics_per_gpu, "page_size": args.page_size,
                     "pages": args.pages, "repeat": args.repeat, "runs": args.runs,
                     "extra_runs": args.extra_runs, "chapters": chapter_list},
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": round(seconds, 1),
        # Other work on the machine skews the numbers: the share of the
        # machine's CPU time that went to other processes during the runs.
        "other_cpu": None if other_cpu is None else round(other_cpu, 3),
        "command": command,
        "counter_rule": counter_rule_of(records),
        "primitives": primitives,
        "prediction": prediction,
        # simnic is a simulation: its numbers are never a provider's measurement.
        "kind": kind_of(provider),
        "simulated": is_simulated(provider),
        "series": {"source": series.SERIES_SOURCE,
                   "gbps": {c: series.series_gbps(c) for c in series.CHAPTERS},
                   "mops": {c: series.series_mops(c) for c in series.CHAPTERS}},
    }
    rows = summarize(records, chapter_list, census)
    add_steps(rows, records)
    add_predictions(rows, prediction)
    replaced = previous_recording(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for r in records + (census or []):  # temporary paths say nothing once the run is over
        if "command" in r:
            r["command"] = re.sub(r"/tmp/[^ ]*/", "<tmp>/", r["command"])
    # The census runs apart from the timed records: nothing that reads the
    # records (medians, the refit) may take their rates.
    (out_dir / "results.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "records": records,
                    **({"census": census} if census is not None else {})}, indent=1) + "\n")
    write_csv(out_dir / "results.csv", meta, rows)
    write_markdown(out_dir / "results.md", meta, rows)
    drew = plot(out_dir)
    refreshed = False
    if args.record and not args.no_docs and is_recorded(out_dir):
        # The docs pages' result tables are generated from results/*/: keep
        # them in step, so that `bazel test //...` (which checks them) passes.
        refreshed = refresh_docs()

    print()
    print(f"{out_dir.name}: {layout_text(meta)}, median of {args.runs} run(s), "
          f"libfabric {meta['libfabric_build'] or meta['libfabric']}"
          f"{' from ' + meta['libfabric_path'] if meta['libfabric_path'] else ''}")
    if is_simulated(provider):
        print(f"SIMULATED ({provider}): not a measurement of a provider")
    print(markdown_table(rows))
    print()
    print(counters_table(rows))
    print()
    print(steps_table(rows))
    if prediction:
        print()
        print(predictions_table(rows))
    if census is not None:
        print()
        print(census_table(rows))
    print()
    print(f"compare: ran for {seconds:.0f} s; wrote results.md, results.csv, results.json"
          f"{', plot.png' if drew else ''} to {shown(out_dir)}")
    say_replaced(out_dir, replaced)
    if refreshed:
        print("compare: refreshed the result tables in docs/ and results/README.md "
              "(maint/docs_diff.py --write)")
    if not is_recorded(out_dir):
        say_how_to_record(out_dir)
    if other_cpu is not None and other_cpu > 0.1:
        print(f"compare: warning: other processes took {100 * other_cpu:.0f}% of the CPU time "
              f"during the runs; the numbers are skewed (see results.md)", file=sys.stderr)
    failed = [r["chapter"] for r in rows if r["runs_ok"] == 0]
    if failed:
        print(f"compare: no successful run of {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
