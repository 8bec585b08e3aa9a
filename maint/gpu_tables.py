#!/usr/bin/env python3
"""Turns a maint/gpu_bench.py run (records.jsonl) into results tables and a plot.

  maint/gpu_tables.py RECORDS.jsonl results/h200x2-shm-cuda --command "..."

Writes results.md (every chapter as Gbps, Mops/s and percent of the
fi_rma_bw ceiling measured in the same run), results.csv, plot.png, and a
copy of the raw records. Nothing is typed in: every number comes from the
records.
"""
import argparse
import csv
import io
import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import series  # noqa: E402


def size_name(size):
    return f"{size // 1048576} MiB" if size >= 1048576 else f"{size // 1024} KiB"


class BadRecords(Exception):
    """A records file that cannot be read: named in one line."""


def read_records(paths):
    records = []
    for path in paths:
        try:
            text = pathlib.Path(path).read_text()
        except OSError as e:
            raise BadRecords(f"{path}: {e.strerror}")
        for number, line in enumerate(text.splitlines(), 1):
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise BadRecords(f"{path}:{number}: not a JSON line")
            if not isinstance(record, dict) or "phase" not in record:
                raise BadRecords(f"{path}:{number}: not a gpu_bench record (no phase)")
            records.append(record)
    return records


class Ceiling:
    """Every fi_rma_bw measurement of one (memory, size); the reference is the
    mean of those where every pair finished (a batch with a failed pair only
    has a partial sum)."""

    def __init__(self, records):
        self.records = records
        self.good = [r for r in records if r.get("ok")]
        self.pairs = records[0]["pairs"]
        # Why this measurement bounds nothing, where it is known not to
        # (one GPU, below); then no row shows a share of it.
        self.not_a_ceiling = None
        # fi_rma_bw with fewer pairs in the same records (one pair alone on
        # one GPU): shown beside this one, never taken as the ceiling.
        self.fewer_pairs = []

    @property
    def one_pair(self):
        """The Gbps of one fi_rma_bw pair alone, where measured, or None."""
        alone = [c for c in self.fewer_pairs if c.pairs == 1 and c.good]
        return alone[0].gbps if alone else None

    @property
    def bound(self):
        """The Gbps a chapter may be compared with, or None."""
        return None if self.not_a_ceiling else self.gbps

    @property
    def gbps(self):
        return sum(r["gbps"] for r in self.good) / len(self.good) if self.good else None

    @property
    def mops(self):
        return sum(r["mops"] for r in self.good) / len(self.good) if self.good else None

    def why_failed(self):
        """The failed pairs' reasons, as gpu_bench records them (older records
        say nothing)."""
        reasons = []
        for r in self.records:
            for f in r.get("failures") or []:
                last = f" (last output: {f['last_lines'][-1]})" if f.get("last_lines") else ""
                where = f" in the {r['failed_in']} run" if r.get("failed_in") else ""
                reasons.append(f"pair {f['pair']} {f['role']}{where}: {f['reason']}{last}")
        return reasons

    def describe(self):
        if not self.good:
            why = self.why_failed()
            return (f"Ceiling (fi_rma_bw, {self.pairs} pairs): no complete measurement"
                    + (": " + "; ".join(why) if why else ""))
        runs = ", ".join(f"{r['gbps']:.1f}" + ("" if r.get("ok") else " (a pair failed)")
                         for r in self.records)
        name = (f"fi_rma_bw, {self.pairs} pairs" if self.not_a_ceiling else
                f"Ceiling (fi_rma_bw, {self.pairs} pairs)")
        text = f"{name}: **{self.gbps:.1f} Gbps**, {self.mops:.3f} Mops/s"
        if len(self.records) > 1:
            text += f" (mean of the complete measurements; each: {runs} Gbps)"
        timed = [r for r in self.good if r.get("pair_seconds")]
        if not timed:
            text += (". Recorded before the bench timed each pair: with its short runs the pairs "
                     "may not have overlapped, so this may overstate the ceiling")
        else:
            # Shows whether the pairs overlapped: see gpu_bench.phase_ceiling.
            text += ". Pairs ran " + "; ".join(
                f"{min(r['pair_seconds']):.2f} to {max(r['pair_seconds']):.2f} s "
                f"(all bytes over the longest: {r['gbps_lower_bound']:.1f} Gbps)" for r in timed)
        if self.not_a_ceiling:
            text += f". **Not a ceiling**: {self.not_a_ceiling}; no share of it is shown"
        for other in self.fewer_pairs:
            text += "\n\n" + other.describe_beside()
        return text

    def describe_beside(self):
        """A measurement with fewer pairs, shown under the reference one."""
        pairs = "1 pair alone" if self.pairs == 1 else f"{self.pairs} pairs at once"
        if not self.good:
            why = self.why_failed()
            return f"fi_rma_bw, {pairs}: no complete measurement" + (": " + "; ".join(why) if why else "")
        ran = "; ".join(f"{min(r['pair_seconds']):.2f} to {max(r['pair_seconds']):.2f} s"
                        if len(r["pair_seconds"]) > 1 else f"{r['pair_seconds'][0]:.2f} s"
                        for r in self.good if r.get("pair_seconds"))
        usec = [u for r in self.good for u in (r.get("calibration") or {}).get("usec_per_write", [])]
        return (f"fi_rma_bw, {pairs}: **{self.gbps:.1f} Gbps**, {self.mops:.3f} Mops/s"
                + (f", ran {ran}" if ran else "")
                + (f", {min(usec):.1f} us per WRITE in its calibration run" if usec else "")
                + (". The column \"x 1 pair\" below is each chapter's Gbps over this." if self.pairs == 1
                   else ""))


# fi_rma_bw's pairs all on one GPU: both sides of every pair use its memory,
# and pairs that share one GPU are each far slower per WRITE than one pair
# alone, so their sum is no upper bound for a chapter that keeps one
# process per side (results/h100-shm-cuda/README.md measured it).
ONE_GPU = ("every fi_rma_bw pair ran both sides on this machine's one GPU, where pairs that "
           "share a GPU are each far slower than one pair alone: their sum bounds nothing")


def load(paths):
    records = read_records(paths)
    env = next((r for r in records if r["phase"] == "env"), {})
    grouped = {}
    for r in records:
        if r["phase"] == "ceiling":
            grouped.setdefault((r["memory"], r["page_size"], r["pairs"]), []).append(r)
    # Per memory and size the most pairs (one per endpoint) are the ceiling;
    # fewer pairs measured beside them are shown with it.
    ceilings = {}
    for (memory, size, pairs) in sorted(grouped, key=lambda k: -k[2]):
        ceiling = Ceiling(grouped[(memory, size, pairs)])
        if (memory, size) in ceilings:
            ceilings[(memory, size)].fewer_pairs.insert(0, ceiling)
        else:
            ceilings[(memory, size)] = ceiling
    if len(env.get("gpus") or []) == 1:
        for (memory, _), ceiling in ceilings.items():
            if memory == "cuda":
                ceiling.not_a_ceiling = ONE_GPU
    runs = [r for r in records if r["phase"] in ("cuda", "host") and r.get("ok") and "gbps" in r]
    # GPU memory over WRITEs that efa emulated is "cuda-emulated" in the
    # server's record: a table of its own, never a GPU number.
    runs = [dict(r, memory=r["memory_label"]) if r.get("memory_label") else r for r in runs]
    failures = [r for r in records if r["phase"] in ("cuda", "host", "smoke") and not r.get("ok")]
    extra = {"split": [r for r in records if r["phase"] == "split"],
             "copy": [r for r in records if r["phase"] == "copy"],
             "mt": [r for r in records if r["phase"] == "mt"]}
    return env, ceilings, runs, failures, extra


def pooled(runs):
    """One record per chapter and configuration: the runs of several records
    files of one setup pooled, their median taken again."""
    groups = {}
    for r in runs:
        key = (r["memory"], r["page_size"], r["chapter"], r.get("poll_threads", "gpu"), r["gpus"],
               r["nics_per_gpu"], r["pages"])
        groups.setdefault(key, []).append(r)
    out = []
    for group in groups.values():
        if len(group) == 1:
            out.append(group[0])
            continue
        every = [g for r in group for g in r["all_gbps"]]
        gbps = statistics.median(every)
        first = group[0]
        out.append(dict(first, gbps=gbps, mops=first["mops"] * gbps / first["gbps"],
                        runs=len(every), all_gbps=every))
    return out


def rows(ceilings, runs):
    out = []
    for r in pooled(runs):
        ceiling = ceilings.get((r["memory"], r["page_size"]))
        share = r["gbps"] / ceiling.bound if ceiling and ceiling.bound else None
        out.append({
            "poll_threads": r.get("poll_threads", "gpu"),
            "memory": r["memory"], "page_size": r["page_size"], "chapter": r["chapter"],
            "gpus": r["gpus"], "nics_per_gpu": r["nics_per_gpu"], "gbps": r["gbps"],
            "mops": r["mops"], "ceiling_gbps": ceiling.gbps if ceiling else None,
            "percent_of_ceiling": 100 * share if share is not None else None,
            "one_pair_gbps": ceiling.one_pair if ceiling else None,
            "runs": r["runs"], "all_gbps": r["all_gbps"], "pages": r["pages"],
            "repeat": r["repeat"], "command": r["command"],
        })
    return out


def last_line(text, missing="?"):
    lines = text.strip().splitlines()
    return lines[-1] if lines else missing


def libfabric_version(fi_info_version):
    """`fi_info --version` prints the tool's version, then "libfabric: X"."""
    for line in fi_info_version.splitlines():
        if line.startswith("libfabric:"):
            return line.split(":", 1)[1].strip()
    return "?"


def markdown(env, ceilings, table, failures, command, title, extra):
    gpus = env.get("gpus", [])
    lines = [f"# {title}", ""]
    lines += ["Measured with `maint/gpu_bench.py`; tables made by `maint/gpu_tables.py` from the raw",
              "records beside this file (`records.jsonl`). Medians of the runs listed.", ""]
    lines += ["| | |", "|---|---|"]
    found = "none found" if env else "not recorded"  # an env record lists none, or none was made
    lines += [f"| GPUs | {f'{len(gpus)} x ' + gpus[0].split(', ')[1] if gpus else found} |"]
    if gpus:
        lines += [f"| driver | {gpus[0].split(', ')[2]} |"]
    lines += [f"| CUDA | {last_line(env.get('cuda', ''))} |"]
    cpu = dict(l.split(":", 1) for l in env.get("cpu", "").splitlines() if ":" in l)
    lines += [f"| CPU | {cpu.get('Model name', '?').strip()}, {cpu.get('CPU(s)', '?').strip()} cores, "
              f"{cpu.get('NUMA node(s)', '?').strip()} NUMA node(s) |"]
    lines += [f"| memory | {env.get('memory', '?').split(':')[-1].strip()} |"]
    lines += [f"| kernel | {env.get('kernel', '?')} |"]
    # Older records do not list the providers the library offered there.
    providers = ", ".join(env.get("libfabric_providers") or ["shm", "tcp", "rxm"])
    offered = " on this machine" if env.get("libfabric_providers") else ""
    lines += [f"| libfabric | {libfabric_version(env.get('libfabric', ''))}, configured with `{env.get('libfabric_build', '--with-cuda')}` (providers{offered}: {providers}) |"
              if offered else
              f"| libfabric | {libfabric_version(env.get('libfabric', ''))}, configured with `{env.get('libfabric_build', '--with-cuda')}` ({providers}) |"]
    lines += ["| provider | shm (two processes on one host) |"]
    lines += [f"| GPU links | {'NV18 (18 NVLinks) between every pair' if 'NV18' in env.get('topology', '') else 'see records'} |"]
    lines += [f"| command | `{command}` |", ""]
    lines += ["The ceiling is fabtests' `fi_rma_bw -o writedata -W 64` with the same provider, memory",
              "and message size, one pair of processes per endpoint, all pairs at once (their sum).",
              ""]
    for memory in ("cuda", "cuda-emulated", "host"):
        sizes = sorted({r["page_size"] for r in table if r["memory"] == memory})
        for size in sizes:
            part = [r for r in table if r["memory"] == memory and r["page_size"] == size]
            if not part:
                continue
            first = part[0]
            ceiling = ceilings.get((memory, size))
            where = ("server on GPU(s) " if memory == "cuda" else "host memory, ")
            lines += [f"## {memory} memory, {size_name(size)} pages, {first['gpus']} group(s) x "
                      f"{first['nics_per_gpu']} endpoints", ""]
            lines += [f"Request per run: {first['pages']} pages x 2 buffers x {first['repeat']} repeats "
                      f"per group. Example server command: `{first['command'].split(' --address-file')[0]} ...`", ""]
            if ceiling:
                lines += [ceiling.describe(), ""]
            polls = sorted({r["poll_threads"] for r in part})
            poll_col = len(polls) > 1
            # A pages column only where runs of one size used different page counts.
            pages_col = len({r["pages"] for r in part}) > 1
            # Each chapter against one fi_rma_bw pair alone, where measured.
            pair_col = any(r["one_pair_gbps"] for r in part)
            head = ("| chapter |" + (" client --poll-threads |" if poll_col else "")
                    + (" pages per buffer |" if pages_col else ""))
            lines += [head + " Gbps | Mops/s | % of ceiling |" + (" x 1 pair |" if pair_col else "")
                      + " runs (Gbps) |",
                      "|---|" + ("---|" if poll_col else "") + ("---:|" if pages_col else "")
                      + "---:|---:|---:|" + ("---:|" if pair_col else "") + "---|"]
            order = lambda r: (series.ORDER.index(r["chapter"]), r["poll_threads"], r["pages"])
            for r in sorted(part, key=order):
                pct = (f"{r['percent_of_ceiling']:.1f}%" if r["percent_of_ceiling"] is not None
                       else "none: not a ceiling" if ceiling and ceiling.not_a_ceiling else "n/a")
                runs = ", ".join(f"{g:.1f}" for g in r["all_gbps"])
                poll = f" {r['poll_threads']} |" if poll_col else ""
                pages = f" {r['pages']} |" if pages_col else ""
                pair = (f" {r['gbps'] / r['one_pair_gbps']:.2f} |" if r["one_pair_gbps"] else " n/a |"
                        ) if pair_col else ""
                lines += [f"| {r['chapter']} |{poll}{pages} {r['gbps']:.1f} | {r['mops']:.3f} | {pct} |{pair} {runs} |"]
            lines += [""]
    # A failed ceiling with no chapter run of its memory and size (a bench
    # that ran only the ceiling, or whose chapters failed too): say why, where
    # the records say (gpu_bench's "failures"; older records do not).
    # Complete ones are shown beside the split and copy phases.
    shown = {(r["memory"], r["page_size"]) for r in table}
    alone = sorted(k for k in ceilings if k not in shown and not ceilings[k].good
                   and ceilings[k].why_failed())
    if alone:
        lines += ["## Failed ceilings", ""]
        for memory, size in alone:
            lines += [f"{memory} memory, {size_name(size)} pages. {ceilings[(memory, size)].describe()}",
                      ""]
    lines += split_section(extra["split"], ceilings) + copy_section(extra["copy"])
    lines += mt_section(extra["mt"])
    if failures:
        lines += ["## Failed runs", ""]
        lines += [f"- {f.get('phase')} {f.get('chapter', '')}: {str(f.get('error', ''))[:200]}" for f in failures]
        lines += [""]
    return "\n".join(lines)


def memory_name(memory):
    return "CUDA" if memory == "cuda" else memory


def split_section(split, ceilings):
    if not split:
        return []
    lines = ["## The same endpoints split over several process pairs", "",
             f"Chapter {split[0]['chapter']}, {memory_name(split[0].get('memory', 'cuda'))} memory: its endpoints divided among K server/client "
             "pairs of processes that run at once, the same bytes in all (each pair writes 1/K of them). "
             "Gbps is all bytes over the slowest pair's time.", "",
             "| page | process pairs | endpoints per pair | Gbps | % of ceiling | each pair (Gbps) |",
             "|---|---:|---:|---:|---:|---|"]
    for r in sorted(split, key=lambda r: (r["page_size"], r["processes_per_side"])):
        ceiling = ceilings.get((r.get("memory", "cuda"), r["page_size"]))
        pct = (f"{100 * r['gbps'] / ceiling.bound:.1f}%" if ceiling and ceiling.bound and r["ok"]
               else "none: not a ceiling" if ceiling and ceiling.not_a_ceiling else "n/a")
        pairs = ", ".join(f"{g:.0f}" for g in r["pair_gbps"]) if r["ok"] else "failed"
        lines += [f"| {size_name(r['page_size'])} | {r['processes_per_side']} | {r['nics_per_process']} "
                  f"| {r['gbps']:.1f} | {pct} | {pairs} |"]
    return lines + [""]


def copy_section(copies):
    if not copies:
        return []
    plain = [r for r in copies if r.get("mode", "copy") == "copy"]
    handles = [r for r in copies if r.get("mode", "copy") == "ipc-handle"]
    lines = []
    if plain:
        lines += ["## A plain cudaMemcpy loop (maint/probes/cuda_copy_probe)", "",
                  f"Blocking cudaMemcpy from GPU {plain[0]['src_device']} memory into GPU "
                  f"{plain[0]['dst_device']} memory, one copy after another per thread.", "",
                  "| size | processes | threads each | Gbps | Mops/s |", "|---|---:|---:|---:|---:|"]
        for r in sorted(plain, key=lambda r: (r["page_size"], r["processes"], r["threads"])):
            lines += [f"| {size_name(r['page_size'])} | {r['processes']} | {r['threads']} | "
                      f"{r['gbps']:.1f} | {r['mops']:.3f} |"]
        lines += [""]
    if handles:
        lines += ["## shm's work per WRITE at the initiator (cuda_copy_probe --mode ipc-handle)", "",
                  "`cuMemGetAddressRange` then `cudaIpcGetMemHandle` on GPU "
                  f"{handles[0]['src_device']} memory, what libfabric's shm calls for every "
                  "WRITE from GPU memory before posting it, one call pair after another per "
                  "thread. Gbps: the rate of WRITEs of that size those calls alone would allow "
                  "(all processes and threads summed).", "",
                  "| size | processes | threads each | Mcalls/s | us per call, each thread | "
                  "WRITE rate allowed (Gbps) |", "|---|---:|---:|---:|---:|---:|"]
        for r in sorted(handles, key=lambda r: (r["page_size"], r["processes"], r["threads"])):
            each = (r["processes"] * r["threads"] / r["mops"]) if r["ok"] and r["mops"] else None
            lines += [f"| {size_name(r['page_size'])} | {r['processes']} | {r['threads']} | "
                      f"{r['mops']:.3f} | {each:.2f} | {r['gbps']:.1f} |" if each else
                      f"| {size_name(r['page_size'])} | {r['processes']} | {r['threads']} | "
                      "failed | | |"]
        lines += [""]
    return lines


def mt_section(mt):
    if not mt:
        return []
    lines = ["## The provider alone: one process or one process per endpoint (fi_rdm_bw_mt)", "",
             "fabtests' `fi_rdm_bw_mt` (one domain and endpoint per thread, one send in flight per "
             "thread; CUDA memory on the first GPU of each side). No tutorial code runs: a gap "
             "between the rows of one page size is the provider's (or CUDA's) limit for one "
             "process.", "",
             "| memory | page | processes per side | endpoints each | Gbps | Mops/s | each ran (s) |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in sorted(mt, key=lambda r: (r["memory"], r["page_size"], r["processes"])):
        gbps = f"{r['gbps']:.1f}" if r["ok"] else "failed"
        ran = r.get("pair_seconds") or []
        ran = f"{min(ran):.2f} to {max(ran):.2f}" if len(ran) > 1 else (f"{ran[0]:.2f}" if ran else "")
        lines += [f"| {r['memory']} | {size_name(r['page_size'])} | {r['processes']} | "
                  f"{r['endpoints_per_process']} | {gbps} | {r['mops']:.3f} | {ran} |"]
    return lines + [""]


def plot(table, ceilings, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the tables do not need it
        print(f"gpu_tables: no matplotlib for {sys.executable}, so no {path.name} (Debian's "
              "python3-matplotlib, from tools/setup.sh, is /usr/bin/python3's)", file=sys.stderr)
        return

    table = [r for r in table if r["poll_threads"] == "gpu"]
    groups = sorted({(r["memory"], r["page_size"]) for r in table})
    if not groups:
        return
    fig, axes = plt.subplots(1, len(groups) + 1, figsize=(4.2 * (len(groups) + 1), 4.2))
    for ax, (memory, size) in zip(axes, groups):
        part = sorted((r for r in table if (r["memory"], r["page_size"]) == (memory, size)),
                      key=lambda r: series.ORDER.index(r["chapter"]))
        names = [series.number(r["chapter"]) for r in part]
        ax.bar(names, [r["gbps"] for r in part], color="#4878d0")
        ceiling = ceilings.get((memory, size))
        if ceiling and ceiling.bound:
            ax.axhline(ceiling.bound, color="#d65f5f", linestyle="--", label="fi_rma_bw")
        if ceiling and ceiling.one_pair:
            ax.axhline(ceiling.one_pair, color="#6acc64", linestyle=":",
                       label="fi_rma_bw, 1 pair alone")
        if ceiling and (ceiling.bound or ceiling.one_pair):
            ax.legend(loc="lower right", fontsize=8)
        ax.set_title(f"{memory}, {size_name(size)} pages", fontsize=10)
        ax.set_ylabel("Gbps")
        ax.set_xlabel("chapter")
    ax = axes[-1]
    ax.bar([series.number(c) for c in series.CHAPTERS],  # ours (16+) have no series number
           [series.series_gbps(c) for c in series.CHAPTERS], color="#999999")
    ax.set_title(f"{series.SERIES_SHORT} (quoted)", fontsize=10)
    ax.set_ylabel("Gbps")
    ax.set_xlabel("chapter")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


CSV_FIELDS = ["memory", "page_size", "chapter", "poll_threads", "gpus", "nics_per_gpu", "gbps",
              "mops", "ceiling_gbps", "percent_of_ceiling", "runs", "pages"]


def tables(records, command, title):
    """results.md and results.csv, as text, from records files."""
    env, ceilings, runs, failures, extra = load(records)
    table = rows(ceilings, runs)
    out = io.StringIO()
    # one_pair_gbps only where one fi_rma_bw pair alone was measured.
    fields = CSV_FIELDS + (["one_pair_gbps"] if any(r["one_pair_gbps"] for r in table) else [])
    w = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\r\n")
    w.writeheader()
    w.writerows(table)
    return markdown(env, ceilings, table, failures, command, title, extra) + "\n", out.getvalue(), \
        table, ceilings


def check(folder):
    """Whether folder's results.md and results.csv are what its records.jsonl
    makes (title and command read back from results.md): tables are made by
    this tool, never edited by hand. Returns a list of problems."""
    try:
        md = (folder / "results.md").read_text()
    except OSError as e:
        return [f"{folder}/results.md: {e.strerror}"]
    title = md.splitlines()[0].removeprefix("# ")
    command = next((line.split("`", 1)[1].rsplit("`", 1)[0] for line in md.splitlines()
                    if line.startswith("| command | `")), None)
    if command is None:
        return [f"{folder}/results.md: no command row"]
    try:
        want_md, want_csv, _, _ = tables([folder / "records.jsonl"], command, title)
    except BadRecords as e:
        return [str(e)]
    problems = []
    if md != want_md:
        problems.append(f"{folder}/results.md differs from what records.jsonl makes")
    try:
        with open(folder / "results.csv", newline="") as f:
            have_csv = f.read()
    except OSError as e:
        return problems + [f"{folder}/results.csv: {e.strerror}"]
    if have_csv != want_csv:
        problems.append(f"{folder}/results.csv differs from what records.jsonl makes")
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", type=pathlib.Path, nargs="+",
                   help="records.jsonl files of one setup, then the output folder; "
                        "with --check: folders to check")
    p.add_argument("--command", help="the gpu_bench command that made the records")
    p.add_argument("--title", default="GPU machine, shm, CUDA and host memory")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if a folder's tables differ from what its records make")
    args = p.parse_args()
    if args.check:
        problems = [x for folder in args.paths for x in check(folder)]
        for x in problems:
            print(f"gpu_tables: {x}")
        print(f"gpu_tables: {len(args.paths)} folder(s) checked, {len(problems)} problem(s)")
        return 1 if problems else 0
    if len(args.paths) < 2 or not args.command:
        p.error("give records files, an output folder and --command")
    records, out = args.paths[:-1], args.paths[-1]
    if out.suffix == ".jsonl":
        p.error(f"the last path is the output folder, not a records file: {out}")
    try:
        text_md, text_csv, table, ceilings = tables(records, args.command, args.title)
    except BadRecords as e:
        p.error(str(e))
    out.mkdir(parents=True, exist_ok=True)
    target = out / "records.jsonl"
    if [p.resolve() for p in records] != [target.resolve()]:
        target.write_text("".join(pathlib.Path(p).read_text() for p in records))
    (out / "results.md").write_text(text_md)
    with open(out / "results.csv", "w", newline="") as f:
        f.write(text_csv)
    plot(table, ceilings, out / "plot.png")
    print(f"gpu_tables: {len(table)} rows into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
