#!/usr/bin/env python3
"""Fits simnic's free CPU costs to the series' p5 ladder, from recorded counters.

The measure is a writer thread's time per WRITE: threads / (M WRITEs/s), with
one thread in chapters 09 and 10 and one per group from 11 on (the series':
09 1.82, 10 1.79, 11 11.8, 12 3.39, 13 2.75, 14 1.62 us; 15 ran at 97% of
its line rate).

The model says where that time goes, per WRITE, from a run's own counters
(docs/simnic.md, "The cost model"); a call takes what it charges:

  charged  = C * CQ reads + (P * posts + D * doorbells + E * CQ entries) * f
  T = real + charged, or (real + charged) / (1 - rho) when balanced

`real` is what the program spends on its own and what the calls cost beyond
their charges (measured: the recorded time less what the run's own model
charged). f is 1 for a pinned thread (its NICs are on its socket) and
(1 + X) / 2 for an unpinned one (on the NICs' socket half the time: the
lone thread of 09 and 10 polls NICs of both sockets; 11's threads are put on
either socket). "Balanced": the run's busy unpinned writers outnumber one
virtual socket's cores (the model line says how many), so the simulated p5
scheduler moves them, and rho = R / M is the share of their time its moves
take (a refill of R ns about every M us). D, E, X and rho are declared, not
fitted (docs/simnic.md says why); the fit chooses P (the post path) and C
(a CQ read) on chapters 10 (one unpinned thread, NICs on both sockets) and
12 (pinned threads, NICs on their socket) of every folder given, both
limited by their CPU, not by the line: with three folders (16, 8 and 4
cores, each its own layout) that is six points for two parameters. It then
predicts every chapter (09, 11, 13 and 14-18 held out) from that chapter's
counters and prints the residual against the series (15: its share of the
line rate, the series' 97%), and
the simulated recording beside it.

  python3 tools/simnic_fit.py results/h200-16core-*simnic*
  python3 tools/simnic_fit.py --markdown results/h200-16core-*simnic*
  python3 tools/simnic_fit.py --summary results/h*-16core-*simnic*

--summary prints one row per chapter and page size instead of one per
folder: the spread, over the folders, of predicted / series and of
predicted / recorded.

With --bounds it checks the recordings against the bounds of the ladder's
issue instead (a thread's time per WRITE within 1.5x of the series' in 09,
10, 12, 13 and 14; 11 at least twice 12; every chapter 11-15 at least 95% of
the WRITE rate of the one before; 15 at 90% of the line or more and the best
of 15-18 at 95%), prints each bound's room (log of value over bound: above
0 holds), and then searches the post path, the CQ read, the other socket's
factor and the scheduler's share for the most room any one choice could
give all the folders at once, each run's real part kept as recorded. It
judges only folders whose pages stand for the series' 64 KiB at the run's
scale (256 bytes at the default 256), where the line allows the p5's WRITE
rate; a folder of other pages is named and left out:

  python3 tools/simnic_fit.py --bounds results/h100-16core-*simnic* results/h200-16core-*simnic*

A folder is a tools/compare.py folder (results.json); its counted runs'
counters and the model line they printed are all the script reads. It
measures nothing.
"""
import argparse
import json
import math
import pathlib
import re
import statistics
import sys

# The series' per-thread time per WRITE (us): threads / (M WRITEs/s) from its
# recorded ladder (tools/series.py has the rates).
SERIES_US = {"09_multinet": 1.82, "10_warmup": 1.79, "11_multithread": 11.8, "12_pin": 3.39,
             "13_shard": 2.75, "14_batch": 1.62}
SERIES_LINE_SHARE = {"15_lazy": 0.971}
CALIBRATION = ("10_warmup", "12_pin")
# A run this close to its line rate waits for the line: its extra CQ reads
# are the wait, so its prediction under other costs is an upper bound.
AT_LINE = 0.97
# Chapters whose writer threads do not pin themselves (the program's fact,
# not a cost): their affinity spans both virtual sockets.
UNPINNED = ("09_multinet", "10_warmup", "11_multithread")
SINGLE_THREAD = ("09_multinet", "10_warmup")

def parse_model(line):
    """The charged costs a run was made with, from its simnic model line
    (the model whose calls take what they charge, balanced moves)."""
    m = re.search(r"calls take what they charge: post (\d+) ns, doorbell (\d+) ns, CQ read (\d+) "
                  r"ns \+ (\d+) ns an entry \(x([\d.]+) from the other virtual socket.*?"
                  r"moved every ([\d.e+]+) us with a (\d+) ns refill while they outnumber one "
                  r"socket's (\d+) cores", line or "")
    if not m:
        return None
    p, d, c, e, x, every, refill, socket_cores = (float(g) for g in m.groups())
    # The page that stands for the series' 64 KiB at the run's scale: at it,
    # the line allows the p5's WRITE rate.
    p5_page = re.search(r"a (\d+)-byte page stands for 64 KiB", line)
    return {"post_ns": p, "doorbell_ns": d, "cq_poll_ns": c, "cq_entry_ns": e,
            "remote_factor": x, "rho": min(0.9, refill / (every * 1000)),
            "socket_cores": int(socket_cores), "p5_page": int(p5_page[1]) if p5_page else None}


def charged_ns(pt, theta):
    f = (1 + theta["remote_factor"]) / 2 if pt["unpinned"] else 1.0
    return (theta["cq_poll_ns"] * pt["cq_reads"] +
            f * (theta["post_ns"] * pt["posts"] + theta["doorbell_ns"] * pt["doorbells"] +
                 theta["cq_entry_ns"] * pt["cq_entries"]))


def points(folder):
    """One point per chapter of a folder: medians of its counted runs."""
    data = json.loads((pathlib.Path(folder) / "results.json").read_text())
    meta = data["meta"]
    by_chapter = {}
    for r in data["records"]:
        if r.get("ok") and not r.get("flags") and r.get("writes"):
            by_chapter.setdefault(r["chapter"], []).append(r)
    out = []
    for chapter, runs in sorted(by_chapter.items()):
        used = parse_model(runs[0].get("model", ""))
        if used is None:
            continue  # made under an older model: its costs are not known here

        def med(key):
            return statistics.median(r[key] / r["writes"] for r in runs)
        gpus = runs[0].get("gpus", meta["settings"]["gpus"])
        threads = 1 if chapter in SINGLE_THREAD else gpus
        mops = statistics.median(r["mops"] for r in runs)
        # link_gbps is the summed line rate of all the layout's NICs.
        line_mops = (runs[0]["link_gbps"] * 1e9 / (8 * runs[0]["page_size"]) / 1e6
                     if runs[0].get("link_gbps") else None)
        unpinned = chapter in UNPINNED
        pt = {"folder": pathlib.Path(folder).name, "chapter": chapter, "threads": threads,
              "page_size": runs[0].get("page_size"),
              "mops": mops, "measured_us": threads / mops, "line_mops": line_mops,
              "posts": med("post_calls"), "doorbells": med("doorbells"),
              "cq_reads": med("cq_reads"), "cq_entries": med("cq_entries"),
              "unpinned": unpinned,
              # The simulated balancer moves busy unpinned threads only while
              # they outnumber one virtual socket's cores.
              "balanced": unpinned and threads > used["socket_cores"], "used": used}
        measured_ns = pt["measured_us"] * 1000
        keep = (1 - used["rho"]) if pt["balanced"] else 1.0
        pt["real_ns"] = measured_ns * keep - charged_ns(pt, used)
        out.append(pt)
    return out


def predict_us(pt, theta):
    """A thread's time per WRITE under costs theta, no less than its share
    of the line allows."""
    t = pt["real_ns"] + charged_ns(pt, theta)
    if pt["balanced"]:
        t /= 1 - theta["rho"]
    t /= 1000
    if pt.get("line_mops"):
        t = max(t, pt["threads"] / pt["line_mops"])
    return t


def fit(pts, declared):
    """Least squares in log(time) over the calibration points, a grid over
    (P, C); D, E, X and rho stay as declared."""
    cal = [p for p in pts if p["chapter"] in CALIBRATION]
    best = None
    for c in range(0, 801, 5):
        for post in range(0, 2001, 5):
            theta = dict(declared, post_ns=post, cq_poll_ns=c)
            err = sum((math.log(predict_us(p, theta)) - math.log(SERIES_US[p["chapter"]])) ** 2
                      for p in cal)
            if best is None or err < best[0]:
                best = (err, theta)
    return best[1], len(cal), best[0]


SCALED_BOUND = 1.5     # a thread's time per WRITE within 1.5x of the series'
PIN_LESSON = 2.0       # 11 takes at least twice 12's time per WRITE
STEP_RATE = 0.95       # each chapter 11-15 keeps 95% of the rate before it
LADDER = ("10_warmup", "11_multithread", "12_pin", "13_shard", "14_batch", "15_lazy")
LINE_15, LINE_BEST = 0.90, 0.95


def bound_room(chapters, time_us):
    """(room, bound, value) for each bound of one folder; room is
    log(value / bound) oriented so that above 0 holds. `time_us(pt)` gives
    a chapter's time per WRITE of a thread."""
    t = {c: time_us(p) for c, p in chapters.items()}
    rate = {c: chapters[c]["threads"] / t[c] for c in t}
    out = []
    for c in ("09_multinet", "10_warmup", "12_pin", "13_shard", "14_batch"):
        if c in t:
            ratio = t[c] / SERIES_US[c]
            out.append((math.log(SCALED_BOUND) - abs(math.log(ratio)),
                        f"{c} within {SCALED_BOUND}x of the series", f"{ratio:.2f}x"))
    if "11_multithread" in t and "12_pin" in t:
        ratio = t["11_multithread"] / t["12_pin"]
        out.append((math.log(ratio / PIN_LESSON), f"11 at least {PIN_LESSON:g}x 12's time",
                    f"{ratio:.2f}x"))
    for before, c in zip(LADDER, LADDER[1:]):
        if before in rate and c in rate:
            ratio = rate[c] / rate[before]
            out.append((math.log(ratio / STEP_RATE), f"{c} at least {STEP_RATE:g}x {before}'s "
                        "rate", f"{ratio:.3f}x"))
    line = chapters.get("15_lazy", {}).get("line_mops")
    if line:
        share = rate["15_lazy"] / line
        out.append((math.log(share / LINE_15), f"15_lazy at {LINE_15:.0%} of the line",
                    f"{share:.1%}"))
        best = max(rate[c] for c in ("15_lazy", "16_thread_domain", "17_op_pool", "18_more")
                   if c in rate)
        out.append((math.log(best / line / LINE_BEST), f"best of 15-18 at {LINE_BEST:.0%} of "
                    "the line", f"{best / line:.1%}"))
    return out


def most_room(folders, declared):
    """The choice of post path, CQ read, other-socket factor and scheduler
    share that gives the least room of all bounds of all folders its
    largest value (a grid), and that least room with where it is."""
    best = None
    for x in (1.5, 2, 2.5, 3, 3.5):
        for rho in (0.45, 0.5, 0.54, 0.58, 0.62):
            for c in range(60, 401, 20):
                for post in range(0, 1201, 40):
                    theta = dict(declared, post_ns=post, cq_poll_ns=c, remote_factor=x, rho=rho)
                    worst = min((room, name, bound)
                                for name, chapters in folders.items()
                                for room, bound, _ in bound_room(
                                    chapters, lambda p: predict_us(p, theta)))
                    if best is None or worst[0] > best[0][0]:
                        best = (worst, theta)
    return best


def at_p5_rate(pt):
    """Whether a folder's pages (those of its point `pt`) stand for the
    series' 64 KiB, so that its line allows the p5's WRITE rate and the
    ladder's bounds apply to it."""
    return pt["used"].get("p5_page") in (None, pt["page_size"])


def print_bounds(pts):
    folders = {}
    for p in pts:
        folders.setdefault(p["folder"], {})[p["chapter"]] = p
    least = None
    for name, chapters in list(folders.items()):
        pt = next(iter(chapters.values()))
        if not at_p5_rate(pt):
            print(f"{name} (recorded, SIMULATED): not judged: its {pt['page_size']}-byte pages put "
                  f"its line at {pt['used']['p5_page'] / pt['page_size']:g}x the p5's WRITE rate "
                  f"(the ladder's bounds are for {pt['used']['p5_page']}-byte pages)")
            del folders[name]
            continue
        print(f"{name} (recorded, SIMULATED):")
        for room, bound, value in bound_room(chapters, lambda p: p["measured_us"]):
            print(f"  {'holds ' if room >= 0 else 'MISSED'} {bound:48s} {value:>8s}  room "
                  f"{room:+.3f}")
            if least is None or room < least[0]:
                least = (room, name, bound)
    if not folders:
        print("no folder at the p5's WRITE rate: nothing to judge")
        return
    print(f"least room in the recordings: {least[0]:+.3f} ({least[1]}: {least[2]})")
    (room, where, bound), theta = most_room(folders, dict(pts[0]["used"]))
    print(f"most room any one choice gives all of them (each run's real part as recorded): "
          f"{room:+.3f}, at SIMNIC_POST_NS={theta['post_ns']} SIMNIC_CQ_POLL_NS="
          f"{theta['cq_poll_ns']} x{theta['remote_factor']:g} from the other socket, rho "
          f"{theta['rho']:g}; its least room: {where}: {bound}")


def print_summary(rows):
    """One Markdown row per chapter and page size: how far the predictions
    fall from the series and from the simulated recordings, over the folders."""
    groups = {}
    for r in rows:
        groups.setdefault((r["chapter"], r["page_size"]), []).append(r)

    def span(values, fmt):
        values = [v for v in values if v is not None]
        if not values:
            return "-"
        lo, hi = fmt(min(values)), fmt(max(values))
        return lo if lo == hi else f"{lo}-{hi}"
    print("| chapter | page | role | folders | predicted / series | predicted / recorded "
          "(SIMULATED) |")
    print("|---|---:|---|---:|---:|---:|")
    for (chapter, page), group in sorted(groups.items()):
        roles = sorted({r["role"] for r in group})
        vs_series = span([r["vs_series"] for r in group], lambda v: f"{v:.2f}")
        if chapter in SERIES_LINE_SHARE:
            vs_series = span([r["line_share"] for r in group], lambda v: f"{100 * v:.0f}%") + \
                " of line (series " + f"{100 * SERIES_LINE_SHARE[chapter]:.0f}%)"
        vs_recorded = span([r["pred"] / r["measured"] for r in group], lambda v: f"{v:.2f}")
        print(f"| {chapter} | {page} B | {'; '.join(roles)} | {len(group)} | {vs_series} | "
              f"{vs_recorded} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=pathlib.Path,
                        help="tools/compare.py folders of simnic runs (results.json)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--summary", action="store_true",
                        help="print one Markdown row per chapter and page size: the spread of "
                        "predicted / series and predicted / recorded over the folders")
    parser.add_argument("--bounds", action="store_true",
                        help="check the recordings against the ladder's bounds, and search the "
                        "free costs for the most room they could have")
    args = parser.parse_args()
    pts = []
    for folder in args.folders:
        if not (folder / "results.json").exists():
            parser.error(f"{folder}: no results.json")
        pts += points(folder)
    if not pts:
        parser.error("no counted runs made under a model this script can read")
    if args.bounds:
        print_bounds(pts)
        return 0
    declared = dict(pts[0]["used"])
    theta, n, err = fit(pts, declared)
    print(f"fit on {n} points ({', '.join(CALIBRATION)} of {len(args.folders)} folder(s)), 2 free "
          f"parameters: SIMNIC_POST_NS={theta['post_ns']} SIMNIC_CQ_POLL_NS={theta['cq_poll_ns']} "
          f"(the recording used {declared['post_ns']:g} and {declared['cq_poll_ns']:g}); declared: "
          f"doorbell {declared['doorbell_ns']:g} ns, CQ entry {declared['cq_entry_ns']:g} ns, "
          f"x{declared['remote_factor']:g} from the other socket (posts, doorbells, entries), "
          f"rho {declared['rho']:.3f} while balanced; "
          f"rms log error {math.sqrt(err / n):.3f}")
    if args.markdown and not args.summary:
        print()
        print("| folder | chapter | role | predicted us/WRITE | series us/WRITE | predicted / "
              "series | recorded us/WRITE (SIMULATED) |")
        print("|---|---|---|---:|---:|---:|---:|")
    rows = []
    for p in pts:
        pred = predict_us(p, theta)
        series = SERIES_US.get(p["chapter"])
        role = "fit" if p["chapter"] in CALIBRATION else "held out"
        if p.get("line_mops") and p["mops"] >= AT_LINE * p["line_mops"]:
            role += ", at the line"
        share = p["threads"] / pred / p["line_mops"] if p.get("line_mops") else None
        rows.append({"chapter": p["chapter"], "page_size": p["page_size"], "role": role,
                     "pred": pred, "measured": p["measured_us"], "line_share": share,
                     "vs_series": pred / series if series else None})
        if args.summary:
            continue
        if series:
            versus, resid = f"{series:.2f}", f"{pred / series:.2f}"
        elif p["chapter"] in SERIES_LINE_SHARE and share is not None:
            versus = f"{100 * SERIES_LINE_SHARE[p['chapter']]:.0f}% of line"
            resid = f"{100 * share:.0f}% of line"
        else:
            versus, resid = "-", "-"
        if args.markdown:
            print(f"| {p['folder']} | {p['chapter']} | {role} | {pred:.2f} | {versus} | {resid} | "
                  f"{p['measured_us']:.2f} |")
        else:
            print(f"{p['folder']:45s} {p['chapter']:17s} {role:9s} predicted {pred:6.2f} us  "
                  f"series {versus:>12}  residual {resid:>12}  recorded {p['measured_us']:6.2f}")
    if args.summary:
        print()
        print_summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
