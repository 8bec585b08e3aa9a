#!/usr/bin/env python3
"""simnic's frozen model: its predictions for a machine, and a refit beside it.

--predict: what the frozen model (simnic/costs.h) says each chapter's rate
will be on a machine, from that machine's measured primitives alone
(`simnic_bench --primitives`: what a post and a CQ read take there beyond
their charges, and one cache-line handoff between two cores), the layout and
the program's profile below. It sees no run of the ladder. tools/compare.py
--provider simnic prints these predictions before its runs and puts the
measured rates beside them afterwards.

  python3 tools/simnic_fit.py --predict --primitives prims.txt --gpus 8 --page-size 256

A thread's time per WRITE of chapter c (threads / M WRITEs/s; one thread in
09 and 10, one per group from 11 on):

  T = A + n_post (P + D x f + post_over) + n_db_extra D f + n_cq (C + cq_over)
        + n_entry E f + atomics + first contacts,
  divided by (1 - rho) while the simulated scheduler balances (11 with two
  groups or more), and never below what the line allows.

P, D, C, E, X (the other socket's factor, f = (1 + X) / 2 for an unpinned
thread, 1 for a pinned one), the refill R and the mean gap G between
balancing decisions are the frozen costs; rho, the share of a balanced
thread's time its refills take, is what simnic's scheduler makes of R and G:
rho = R / (R + G exp(-R / G)) (scheduler_share below);
post_over and cq_over are the machine's; `atomics` is the shared counters'
line handoffs (2 a WRITE in 11 and 12, shared by all groups; 13's per-group
counters share a line with up to 3 neighbours); A and the calls per WRITE
are the program's profile (PROFILE below), counted where its thread is
limited by its CPU alone.

With --refit (or folders alone) it refits instead, a published experiment beside the
frozen model and never its source: it fits the post path P and the CQ read
C, by least squares in log time, to the series' time per WRITE of a thread
on chapters 10 and 12 of the folders given (tools/compare.py folders), each
run's own part outside the charges as recorded, and prints the fitted
values and the residuals at those points. It predicts nothing else: a
prediction that starts from a run's own time is not one.

  python3 tools/simnic_fit.py --refit results/h200x2-fresh/*page256

--costs prints simnic/costs.h as a table (docs/simnic.md shows it);
--errors a row per chapter and page size: the predictions' errors over the
folders. --ladder prints a row per recorded folder: each lesson's step with its
noise and verdict (compare.py's), and how far the predictions fell:

  python3 tools/simnic_fit.py --ladder results/h200x2-fresh

--summary groups the folders by page size and CPU count: each lesson's step
in every round (`-r2` in a folder's name), how many rounds gained or lost
beyond the noise, and each chapter's prediction error round by round
(results/h200x2-fresh/README.md holds it, written by maint/docs_diff.py):

  python3 tools/simnic_fit.py --summary results/h200x2-fresh
"""
import argparse
import json
import math
import pathlib
import re
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
COSTS_HEADER = ROOT / "simnic" / "costs.h"

# The series' per-thread time per WRITE (us): threads / (M WRITEs/s) from its
# recorded ladder (tools/series.py has the rates).
SERIES_US = {"09_multinet": 1.82, "10_warmup": 1.79, "11_multithread": 11.8, "12_pin": 3.39,
             "13_shard": 2.75, "14_batch": 1.62}
CALIBRATION = ("10_warmup", "12_pin")
# Chapters whose writer threads do not pin themselves (the program's fact,
# not a cost): their affinity spans both virtual sockets.
UNPINNED = ("09_multinet", "10_warmup", "11_multithread")
SINGLE_THREAD = ("09_multinet", "10_warmup")
# The program's profile, per WRITE of a writer thread limited by its CPU
# alone: A (ns outside provider calls), CQ reads, doorbells, and the shared
# counter lines it touches. Counted on the H100 16-core recording of
# 2026-11-28 with one group of 4 NICs and 128-byte pages (taskset -c 0-3:
# one thread, so no line is shared there; results/h100-16core-taskset4-
# simnic-host-1x4-page128), the medians of its counters. Every chapter
# posts once a WRITE (FI_MORE in 18 holds 3 of 4 doorbells back).
# shared: the counters' lines: "all" (atomics every group's thread
# updates, 2 a WRITE), "4" (per-group counters, 4 groups to a line), none.
PROFILE = {
    "09_multinet": {"app_ns": 74, "cq_reads": 4.993, "doorbells": 1.0, "shared": None},
    "10_warmup": {"app_ns": 107, "cq_reads": 4.995, "doorbells": 1.0, "shared": None},
    "11_multithread": {"app_ns": 188, "cq_reads": 4.987, "doorbells": 1.0, "shared": "all"},
    "12_pin": {"app_ns": 118, "cq_reads": 4.993, "doorbells": 1.0, "shared": "all"},
    "13_shard": {"app_ns": 99, "cq_reads": 4.992, "doorbells": 1.0, "shared": "4"},
    "14_batch": {"app_ns": 89, "cq_reads": 0.597, "doorbells": 1.0, "shared": "4"},
    "15_lazy": {"app_ns": 77, "cq_reads": 0.500, "doorbells": 1.0, "shared": "4"},
    "16_thread_domain": {"app_ns": 89, "cq_reads": 0.499, "doorbells": 1.0, "shared": "4"},
    "17_op_pool": {"app_ns": 36, "cq_reads": 0.500, "doorbells": 1.0, "shared": "4"},
    "18_more": {"app_ns": 45, "cq_reads": 0.527, "doorbells": 0.25, "shared": "4"},
}
SHARED_LINE_UPDATES = 2  # posted and finished, each WRITE


def frozen_costs(path=COSTS_HEADER):
    """The frozen costs: {name: value} from simnic/costs.h's lines
    `inline constexpr <type> k<Name> = <number>;`."""
    text = pathlib.Path(path).read_text()
    return {m[1]: float(m[2]) for m in
            re.finditer(r"^inline constexpr \w+ (k\w+) = ([0-9.]+);", text, re.M)}


def read_primitives(text):
    """The JSON of the line `simnic_primitives {...}` simnic_bench
    --primitives printed (the whole output may be given)."""
    for line in text.splitlines():
        if line.startswith("simnic_primitives "):
            return json.loads(line.split(" ", 1)[1])
    raise ValueError("no simnic_primitives line")


def scheduler_share(refill_ns, gap_ns):
    """The share of a balanced thread's time that its refills take, under
    simnic's scheduler (simnic/model.cc, PlaceThisThread): a decision falls
    an exponential gap (mean G) after the previous one, drawn when that one
    was made, and a move spins its refill R at once. A decision that falls
    inside the refill takes effect at the thread's next call, so moves come
    every max(gap, R) on average, R + G exp(-R / G), not every G:
    rho = R / (R + G exp(-R / G)). (The call the refill rides on, a few
    microseconds, is left out.)"""
    if refill_ns <= 0:
        return 0.0
    if gap_ns <= 0:
        return 1.0
    return refill_ns / (refill_ns + gap_ns * math.exp(-refill_ns / gap_ns))


def line_mops(gpus, nics_per_gpu, page_size, costs):
    return gpus * nics_per_gpu * costs["kLineGbps"] * 1e9 / costs["kScale"] / (8 * page_size) / 1e6


def predict_chapter(chapter, costs, prims, gpus, nics_per_gpu=4, page_size=256, pages=1000,
                    repeat=200):
    """(M WRITEs/s, a thread's us per WRITE, whether the line limits it) of
    one chapter under the frozen costs on a machine with primitives
    `prims`."""
    prof = PROFILE[chapter]
    threads = 1 if chapter in SINGLE_THREAD else gpus
    f = (1 + costs["kRemoteNumaFactor"]) / 2 if chapter in UNPINNED else 1.0
    ns = prof["app_ns"]
    ns += costs["kPostNs"] + prims["post_over_ns"] + costs["kDoorbellNs"] * prof["doorbells"] * f
    ns += prof["cq_reads"] * (costs["kCqPollNs"] + prims["cq_read_over_ns"])
    ns += costs["kCqEntryNs"] * f
    sharing = {"all": gpus, "4": min(gpus, 4)}.get(prof["shared"], 1)
    ns += SHARED_LINE_UPDATES * prims["line_ns"] * (sharing - 1) / sharing
    if chapter == "09_multinet":  # first contacts in the timed part
        ns += costs["kFirstContactNs"] * nics_per_gpu * 2 / (2 * pages * repeat)
    # The simulated scheduler balances 11's threads when they outnumber one
    # virtual socket's cores (the server runs on one core per writer).
    socket_cores = max(1, gpus // int(costs["kNumaNodes"]))
    if chapter == "11_multithread" and gpus > socket_cores:
        ns /= 1 - scheduler_share(costs["kRefillNs"], costs["kMigrateUs"] * 1000)
    us = ns / 1000
    line = line_mops(gpus, nics_per_gpu, page_size, costs)
    at_line = threads / us > line
    if at_line:
        us = threads / line
    return threads / us, us, at_line


def predict_ladder(chapters, prims, gpus, nics_per_gpu=4, page_size=256, pages=1000, repeat=200,
                   costs=None):
    costs = costs or frozen_costs()
    out = {}
    for c in chapters:
        if c in PROFILE:
            mops, us, at_line = predict_chapter(c, costs, prims, gpus, nics_per_gpu, page_size,
                                                pages, repeat)
            out[c] = {"mops": mops, "us_per_write": us, "at_line": at_line}
    return out


def parse_model(line):
    """The charged costs a run was made with, from its simnic model line."""
    m = re.search(r"calls take what they charge: post (\d+) ns, doorbell (\d+) ns, CQ read (\d+) "
                  r"ns \+ (\d+) ns an entry \(x([\d.]+) from the other virtual socket for "
                  r"(post, )?doorbell.*?moved every ([\d.e+]+) us with a (\d+) ns refill while "
                  r"they outnumber one socket's (\d+) cores", line or "")
    if not m:
        return None
    p, d, c, e, x = (float(g) for g in m.groups()[:5])
    every, refill, socket_cores = (float(g) for g in m.groups()[6:])
    return {"post_ns": p, "doorbell_ns": d, "cq_poll_ns": c, "cq_entry_ns": e,
            "remote_factor": x, "post_remote": bool(m[6]),
            "rho": min(0.9, scheduler_share(refill, every * 1000)),
            "socket_cores": int(socket_cores)}


def charged_ns(pt, theta):
    f = (1 + theta["remote_factor"]) / 2 if pt["unpinned"] else 1.0
    fp = f if theta.get("post_remote") else 1.0
    return (theta["cq_poll_ns"] * pt["cq_reads"] + theta["post_ns"] * pt["posts"] * fp +
            f * (theta["doorbell_ns"] * pt["doorbells"] + theta["cq_entry_ns"] * pt["cq_entries"]))


def points(folder):
    """The calibration chapters of a folder: medians of its counted runs."""
    data = json.loads((pathlib.Path(folder) / "results.json").read_text())
    meta = data["meta"]
    by_chapter = {}
    for r in data["records"]:
        if r.get("ok") and not r.get("flags") and r.get("writes") and \
                r["chapter"] in CALIBRATION:
            by_chapter.setdefault(r["chapter"], []).append(r)
    out = []
    for chapter, runs in sorted(by_chapter.items()):
        used = parse_model(runs[0].get("model", ""))
        if used is None:
            continue  # made under a model this script cannot read

        def med(key):
            return statistics.median(r[key] / r["writes"] for r in runs)
        gpus = runs[0].get("gpus", meta["settings"]["gpus"])
        threads = 1 if chapter in SINGLE_THREAD else gpus
        mops = statistics.median(r["mops"] for r in runs)
        unpinned = chapter in UNPINNED
        pt = {"folder": pathlib.Path(folder).name, "chapter": chapter, "threads": threads,
              "measured_us": threads / mops, "posts": med("post_calls"),
              "doorbells": med("doorbells"), "cq_reads": med("cq_reads"),
              "cq_entries": med("cq_entries"), "unpinned": unpinned,
              "balanced": unpinned and threads > used["socket_cores"], "used": used}
        keep = (1 - used["rho"]) if pt["balanced"] else 1.0
        pt["real_ns"] = pt["measured_us"] * 1000 * keep - charged_ns(pt, used)
        out.append(pt)
    return out


def refit_us(pt, theta):
    t = pt["real_ns"] + charged_ns(pt, theta)
    if pt["balanced"]:
        t /= 1 - theta["rho"]
    return t / 1000


def fit(pts, declared):
    """Least squares in log(time) over the calibration points, a grid over
    (P, C); the rest as the runs were made."""
    best = None
    for c in range(0, 801, 5):
        for post in range(0, 2001, 5):
            theta = dict(declared, post_ns=post, cq_poll_ns=c)
            err = sum((math.log(refit_us(p, theta)) - math.log(SERIES_US[p["chapter"]])) ** 2
                      for p in pts)
            if best is None or err < best[0]:
                best = (err, theta)
    return best[1], best[0]


def print_prediction(pred, layout):
    print(f"simnic's frozen model ({COSTS_HEADER.relative_to(ROOT)}), predicted before any run "
          f"(SIMULATED), {layout}:")
    print("| chapter | predicted M WRITEs/s | a thread's us / WRITE | limited by |")
    print("|---|---:|---:|---|")
    for c, p in pred.items():
        print(f"| {c} | {p['mops']:.3f} | {p['us_per_write']:.2f} | "
              f"{'the line' if p['at_line'] else 'its CPU'} |")


LESSONS = {  # the steps each page size is judged on
    256: (("11_multithread", "12_pin"), ("12_pin", "13_shard"), ("13_shard", "14_batch")),
    128: (("14_batch", "15_lazy"), ("16_thread_domain", "17_op_pool"),
          ("17_op_pool", "18_more")),
}


def prediction_errors(data, again=False):
    """{chapter: predicted / measured median - 1} of a compare.py folder: the
    predictions recorded before its runs or, with `again`, today's model
    applied to the primitives and layout it recorded (an after-the-fact
    check of the model, not a prediction)."""
    if not again:
        return {r["chapter"]: r["prediction_error"] for r in data["rows"]
                if r.get("prediction_error") is not None}
    meta = data["meta"]
    prims, s = meta.get("primitives"), meta["settings"]
    if not prims:
        return {}
    measured = {r["chapter"]: r["mops_median"] for r in data["rows"] if r.get("mops_median")}
    pred = predict_ladder(list(measured), prims, s["gpus"], s.get("nics_per_gpu", 4),
                          s["page_size"], s.get("pages", 1000), s.get("repeat", 200))
    return {c: p["mops"] / measured[c] - 1 for c, p in pred.items()}


def ladder_rows(folders, again=False):
    """One row per recorded folder: its CPUs, layout and page, each lesson's
    step (ratio, uncertainty, verdict as compare.py judged it) and the
    prediction's largest error."""
    rows = []
    for folder in folders:
        data = json.loads((pathlib.Path(folder) / "results.json").read_text())
        meta, by = data["meta"], {r["chapter"]: r for r in data["rows"]}
        s = meta["settings"]
        steps = []
        for before, after in LESSONS.get(s["page_size"], ()):
            r = by.get(after, {})
            if "step" in r and before in by:
                noise = r.get("step_noise")
                steps.append(f"{before[:2]}->{after[:2]} x{r['step']:.3f}"
                             f"{'' if noise is None else f' ±{noise:.3f}'} {r['step_verdict']}")
        errors = list(prediction_errors(data, again).values())
        worst = max(errors, key=abs) if errors else None
        rows.append({"folder": pathlib.Path(folder).name, "cpus": meta["machine"]["cpus"],
                     "layout": f"{s['gpus']}x{s['nics_per_gpu']}", "page": s["page_size"],
                     "steps": steps, "worst": worst,
                     "within": sum(abs(e) <= 0.15 for e in errors), "predicted": len(errors)})
    return rows


def print_ladder(folders, again=False):
    print("| folder (SIMULATED) | CPUs | layout | page | lessons' steps (x rate, ± noise) | "
          "predictions within 15% | worst prediction error |")
    print("|---|---:|---|---:|---|---:|---:|")
    rows = ladder_rows(folders, again)
    for r in sorted(rows, key=lambda r: (r["page"], r["cpus"], r["folder"])):
        worst = "-" if r["worst"] is None else f"{100 * r['worst']:+.1f}%"
        print(f"| {r['folder']} | {r['cpus']} | {r['layout']} | {r['page']} B | "
              f"{'; '.join(r['steps'])} | {r['within']} of {r['predicted']} | {worst} |")


def print_errors(folders, again=False):
    """One row per chapter and page: how far the predictions made before
    the runs (or, `again`, today's model on their primitives) fell from the
    measured medians, over the folders."""
    errors = {}
    for folder in folders:
        data = json.loads((pathlib.Path(folder) / "results.json").read_text())
        page = data["meta"]["settings"]["page_size"]
        for chapter, error in prediction_errors(data, again).items():
            errors.setdefault((page, chapter), []).append(error)
    print("| chapter | page | folders | predicted / measured - 1 | within 15% |")
    print("|---|---:|---:|---:|---:|")
    for (page, chapter), e in sorted(errors.items()):
        print(f"| {chapter} | {page} B | {len(e)} | {100 * min(e):+.0f}% to {100 * max(e):+.0f}% | "
              f"{sum(abs(x) <= 0.15 for x in e)} of {len(e)} |")


def _round_of(folder):
    """A folder's round from its name (`-r2-`), 1 when it names none."""
    m = re.search(r"-r(\d+)-", pathlib.Path(folder).name)
    return int(m.group(1)) if m else 1


def _pooled_step(entries, before, after):
    """A step judged on every round's runs at once (compare.py's rule)."""
    import compare  # compare imports this module: imported when used

    records = [r for _, _, data in entries for r in data.get("records", [])]
    a, b = compare.log_rates(records, before), compare.log_rates(records, after)
    if not a or not b:
        return ""
    step, noise = compare.step_between(a, b)
    if noise is None:
        return f"x{step:.3f}"
    return f"x{step:.3f} ±{noise:.3f} {compare.step_verdict(step, noise)}"


def summary_text(folders):
    """The lessons of fresh ladders, grouped by page size and CPU count: each
    lesson's step in every round (ratio, uncertainty, verdict, as compare.py
    judged it), how many rounds showed a gain or a loss beyond the noise, and
    each chapter's prediction error (recorded before the runs) in every
    round, the ones beyond 15% in bold. Markdown."""
    runs = {}  # (page, cpus) -> [(round, layout, data)]
    for folder in folders:
        data = json.loads((pathlib.Path(folder) / "results.json").read_text())
        meta = data["meta"]
        s = meta["settings"]
        key = (s["page_size"], meta["machine"]["cpus"])
        runs.setdefault(key, []).append((_round_of(folder), f"{s['gpus']} x {s['nics_per_gpu']}",
                                         data))
    out = []
    for page in sorted({k[0] for k in runs}, reverse=True):
        keys = sorted(k for k in runs if k[0] == page)
        rounds = sorted({r for k in keys for r, _, _ in runs[k]})
        out += [f"**{page}-byte pages, the lessons' steps** (SIMULATED; rate ratio, "
                "± the half-width of its 95% interval (Welch's t-test on the runs), compare.py's verdict):", "",
                "| CPUs | layout | step | " + " | ".join(f"round {r}" for r in rounds)
                + " | all rounds' runs together | gain beyond noise | loss beyond noise |",
                "|---:|---|---|" + "---|" * len(rounds) + "---|---:|---:|"]
        for key in keys:
            entries = sorted(runs[key], key=lambda e: e[0])
            layout = entries[0][1]
            for before, after in LESSONS.get(page, ()):
                cells, gains, losses, judged = {}, 0, 0, 0
                for rnd, _, data in entries:
                    by = {r["chapter"]: r for r in data["rows"]}
                    r = by.get(after, {})
                    if r.get("step") is None or before not in by:
                        continue
                    judged += 1
                    verdict = r.get("step_verdict", "")
                    gains += verdict == "gain"
                    losses += verdict == "LOSS"
                    noise = r.get("step_noise")
                    cells[rnd] = (f"x{r['step']:.3f}" + ("" if noise is None else f" ±{noise:.3f}")
                                  + f" {verdict}")
                out.append(f"| {key[1]} | {layout} | {before[:2]} -> {after[:2]} | "
                           + " | ".join(cells.get(r, "") for r in rounds)
                           + f" | {_pooled_step(entries, before, after)}"
                           + f" | {gains} of {judged} | {losses} of {judged} |")
        chapters = [c for c in PROFILE if any(
            c in prediction_errors(d) for k in keys for _, _, d in runs[k])]
        out += ["", f"**{page}-byte pages, the predictions** (made before the runs from each "
                "machine's primitives; predicted / measured - 1 in %, rounds "
                + ", ".join(str(r) for r in rounds) + "; beyond 15% in bold):", "",
                "| CPUs | " + " | ".join(c[:2] for c in chapters) + " |",
                "|---:|" + "---:|" * len(chapters)]
        for key in keys:
            entries = sorted(runs[key], key=lambda e: e[0])
            errors = [prediction_errors(d) for _, _, d in entries]
            cells = []
            for c in chapters:
                vals = [e[c] for e in errors if c in e]
                cells.append(" / ".join((f"**{100 * v:+.1f}**" if abs(v) > 0.15
                                         else f"{100 * v:+.1f}") for v in vals))
            out.append(f"| {key[1]} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def compare_folders(paths):
    """The compare.py folders among paths: each one holding results.json,
    and the folders of a group (results/h200x2-fresh: a folder of them);
    anything else (a README, a logs folder a glob caught) is left out."""
    found = []
    for path in map(pathlib.Path, paths):
        if (path / "results.json").is_file():
            found.append(path)
        elif path.is_dir():
            found += sorted(p.parent for p in path.glob("*/results.json"))
    return found


def costs_table(path=COSTS_HEADER):
    """simnic/costs.h as a Markdown table: variable, frozen value, rule."""
    lines = ["| variable | frozen value | rule |", "|---|---:|---|"]
    pattern = (r"^inline constexpr \w+ (k\w+) = ([0-9.]+);\s*// (SIMNIC_\w+): (.*)\n"
               r"((?:[ \t]+//.*\n)*)")  # a rule may go on in comments aligned under it
    for m in re.finditer(pattern, pathlib.Path(path).read_text(), re.M):
        rule = " ".join([m[4].strip()] + [line.strip()[2:].strip()
                                          for line in m[5].splitlines()])
        lines.append(f"| `{m[3]}` | {float(m[2]):g} | {rule} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=pathlib.Path,
                        help="for the refit: tools/compare.py folders of simnic runs")
    parser.add_argument("--refit", action="store_true",
                        help="refit the post path and the CQ read to the series (the default "
                        "with folders): an experiment beside the frozen model")
    parser.add_argument("--costs", action="store_true",
                        help="print simnic/costs.h as a table: each frozen cost and its rule")
    parser.add_argument("--errors", action="store_true",
                        help="one row per chapter and page: the predictions' errors over the "
                        "folders")
    parser.add_argument("--ladder", action="store_true",
                        help="one row per folder: the lessons' steps with their noise and "
                        "the predictions' errors, as compare.py recorded them")
    parser.add_argument("--summary", action="store_true",
                        help="by page size and CPU count: each lesson's step in every round "
                        "and the rounds that gained beyond the noise, and every chapter's "
                        "prediction error (results/h200x2-fresh/README.md shows it)")
    parser.add_argument("--again", action="store_true",
                        help="with --errors or --ladder: today's model on each folder's "
                        "recorded primitives and layout instead of the predictions recorded "
                        "before its runs (a check after the fact, not a prediction)")
    parser.add_argument("--predict", action="store_true",
                        help="predict each chapter's rate from the frozen costs and --primitives")
    parser.add_argument("--primitives", type=pathlib.Path,
                        help="the output of simnic_bench --primitives on the machine")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--nics-per-gpu", type=int, default=4)
    parser.add_argument("--page-size", type=int, default=256)
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    if args.costs:
        print(costs_table(), end="")
        return 0
    if args.predict:
        if not args.primitives:
            parser.error("--predict needs --primitives (simnic_bench --primitives > FILE)")
        prims = read_primitives(args.primitives.read_text())
        pred = predict_ladder(list(PROFILE), prims, args.gpus, args.nics_per_gpu,
                              args.page_size, args.pages, args.repeat)
        print_prediction(pred, f"{args.gpus} x {args.nics_per_gpu}, page {args.page_size} B")
        return 0
    if not args.folders:
        parser.error("give folders to refit, or --predict")
    if args.ladder or args.errors or args.summary:
        args.folders = compare_folders(args.folders)
        if not args.folders:
            parser.error("no tools/compare.py folder (with a results.json) among those given")
    if args.ladder:
        print_ladder(args.folders, args.again)
        return 0
    if args.summary:
        print(summary_text(args.folders), end="")
        return 0
    if args.errors:
        print_errors(args.folders, args.again)
        return 0
    pts = []
    for folder in args.folders:
        if not (folder / "results.json").exists():
            parser.error(f"{folder}: no results.json")
        pts += points(folder)
    if not pts:
        parser.error("no counted runs made under a model this script can read")
    declared = dict(pts[0]["used"])
    theta, err = fit(pts, declared)
    print(f"refit (an experiment beside the frozen model, not its source) on {len(pts)} points "
          f"({', '.join(CALIBRATION)} of {len(args.folders)} folder(s)): SIMNIC_POST_NS="
          f"{theta['post_ns']} SIMNIC_CQ_POLL_NS={theta['cq_poll_ns']} (the runs used "
          f"{declared['post_ns']:g} and {declared['cq_poll_ns']:g}); rms log error "
          f"{math.sqrt(err / len(pts)):.3f}")
    print("| folder | chapter | refit us/WRITE | series us/WRITE | refit / series | recorded "
          "us/WRITE (SIMULATED) |")
    print("|---|---|---:|---:|---:|---:|")
    for p in pts:
        t = refit_us(p, theta)
        series = SERIES_US[p["chapter"]]
        print(f"| {p['folder']} | {p['chapter']} | {t:.2f} | {series:.2f} | {t / series:.2f} | "
              f"{p['measured_us']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
