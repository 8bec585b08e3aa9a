#!/usr/bin/env python3
"""Fits simnic's free CPU costs to the series' p5 ladder, from recorded counters.

The measure is a writer thread's time per WRITE: threads / (M WRITEs/s), with
one thread in chapters 09 and 10 and one per group from 11 on (the series':
09 1.82, 10 1.79, 11 11.8, 12 3.39, 13 2.75, 14 1.62 us; 15 ran at 97% of
its line rate).

The model predicts it from a run's own counters (docs/simnic.md, "The cost
model"), per WRITE:

  real     = ns_per_write_app (the program's own work, measured)
             + the simulator's own cost of its calls (measured with every
               charged cost 0: SIM_POST_NS per post, SIM_CQ_READ_NS per read)
  charged  = P * posts + D * doorbells + C * CQ reads + E * CQ entries
  pinned   T = real + charged
  unpinned T = (real + charged * (1 + X) / 2) / (1 - rho)

An unpinned thread (its affinity spans both virtual sockets: chapters 09-11
of the series do not pin) is on the NICs' socket half the time, and pays X
from the other one; rho = R / (M + R) is the share of its time the simulated
p5 scheduler's moves take (a refill of R ns every M us). D, E and X are
fixed (stated in docs/simnic.md); the fit chooses P, C and rho.

The fit uses the calibration chapters (11, 12, 14) of every folder given:
with three folders (16, 8 and 4 cores, each its own layout) that is nine
points for three parameters. It then predicts the held-out chapters (09, 10,
13 and 15 against the series; 16-18, which the series has no number for,
against the simulation's own measurement) and prints every residual.

  python3 tools/simnic_fit.py results/*simnic*
  python3 tools/simnic_fit.py --markdown results/h100-16core-simnic-host-8x4-page256 ...

A folder is a tools/compare.py folder (results.json); its counters and the
model line its runs printed are all the script reads. It measures nothing.
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
CALIBRATION = ("11_multithread", "12_pin", "14_batch")
# Chapters whose writer threads do not pin themselves (the program's fact,
# not a cost): their affinity spans both virtual sockets.
UNPINNED = ("09_multinet", "10_warmup", "11_multithread")
SINGLE_THREAD = ("09_multinet", "10_warmup")

# Fixed, not fitted (docs/simnic.md says why each is what it is).
FIXED = {"doorbell_ns": 250.0, "cq_entry_ns": 40.0, "remote_factor": 3.0, "migrate_us": 500.0}
# The simulator's own cost with every charged cost 0 (simnic_bench, 32-core
# machine, libfabric 1.17): per post (descriptor, ring, lock) and per CQ read.
SIM_POST_NS = {"FI_THREAD_SAFE": 260.0, "FI_THREAD_DOMAIN": 170.0}
SIM_CQ_READ_NS = {"FI_THREAD_SAFE": 25.0, "FI_THREAD_DOMAIN": 5.0}


def parse_model(line):
    """The charged costs a run was made with, from its simnic model line."""
    new = re.search(r"post (\d+) ns, doorbell (\d+) ns, CQ read (\d+) ns \+ (\d+) ns an entry "
                    r"\(x([\d.]+) from the other virtual socket\).*?moved every ([\d.e+]+) us "
                    r"with a (\d+) ns refill", line or "")
    if new:
        p, d, c, e, x, m, r = (float(g) for g in new.groups())
        return {"post_ns": p, "doorbell_ns": d, "cq_poll_ns": c, "cq_entry_ns": e,
                "remote_factor": x, "rho": r / (m * 1000 + r) if r else 0.0}
    old = re.search(r"doorbell (\d+) ns \((\d+) ns across.*?CQ poll (\d+) ns, post (\d+) ns",
                    line or "")
    if old:
        d, dr, c, p = (float(g) for g in old.groups())
        return {"post_ns": p, "doorbell_ns": d, "cq_poll_ns": c, "cq_entry_ns": 0.0,
                "remote_factor": dr / d if d else 1.0, "rho": 0.0, "legacy": True}
    return None


def points(folder):
    """One point per chapter of a folder: medians of its counted runs."""
    data = json.loads((pathlib.Path(folder) / "results.json").read_text())
    meta = data["meta"]
    out = []
    by_chapter = {}
    for r in data["records"]:
        if r.get("ok") and not r.get("flags") and r.get("writes"):
            by_chapter.setdefault(r["chapter"], []).append(r)
    for chapter, runs in by_chapter.items():
        def med(key, per_write=True):
            vals = [r[key] / r["writes"] if per_write else r[key] for r in runs
                    if r.get(key) is not None]
            return statistics.median(vals) if vals else 0.0
        gpus = runs[0].get("gpus", meta["settings"]["gpus"])
        threads = 1 if chapter in SINGLE_THREAD else gpus
        mops = statistics.median(r["mops"] for r in runs)
        threading = runs[0].get("threading", "FI_THREAD_SAFE")
        line_mops = (gpus * runs[0].get("nics_per_gpu", meta["settings"]["nics_per_gpu"]) *
                     runs[0].get("link_gbps", 0) * 1e9 / (8 * runs[0].get("page_size", 256)) /
                     1e6) if runs[0].get("link_gbps") else None
        out.append({"folder": pathlib.Path(folder).name, "chapter": chapter, "threads": threads,
                    "gpus": gpus, "mops": mops, "measured_us": threads / mops,
                    "line_mops": line_mops,
                    "posts": med("post_calls"), "doorbells": med("doorbells"),
                    "cq_reads": med("cq_reads"), "cq_entries": med("cq_entries"),
                    "app_ns": med("ns_per_write_app", per_write=False),
                    "sim_ns": med("post_calls") * SIM_POST_NS.get(threading, 260.0) +
                    med("cq_reads") * SIM_CQ_READ_NS.get(threading, 25.0),
                    "unpinned": chapter in UNPINNED,
                    "model": parse_model(runs[0].get("model", ""))})
    return out


def predict_us(pt, post_ns, cq_poll_ns, rho, doorbell_ns, cq_entry_ns, remote_factor):
    charged = (post_ns * pt["posts"] + doorbell_ns * pt["doorbells"] +
               cq_poll_ns * pt["cq_reads"] + cq_entry_ns * pt["cq_entries"])
    real = pt["app_ns"] + pt["sim_ns"]
    if pt["unpinned"]:
        return (real + charged * (1 + remote_factor) / 2) / (1 - rho) / 1000
    return (real + charged) / 1000


def predict_with(pt, theta):
    return predict_us(pt, theta["post_ns"], theta["cq_poll_ns"], theta["rho"],
                      theta.get("doorbell_ns", FIXED["doorbell_ns"]),
                      theta.get("cq_entry_ns", FIXED["cq_entry_ns"]),
                      theta.get("remote_factor", FIXED["remote_factor"]))


def fit(pts):
    """Least squares in log(time) over the calibration points: a grid over
    (P, C, rho), fine enough for three parameters."""
    cal = [p for p in pts if p["chapter"] in CALIBRATION]
    best = None
    for rho_i in range(0, 90, 2):
        rho = rho_i / 100
        for c in range(0, 801, 20):
            for post in range(0, 2501, 25):
                theta = {"post_ns": post, "cq_poll_ns": c, "rho": rho}
                err = sum((math.log(predict_with(p, theta)) - math.log(SERIES_US[p["chapter"]]))
                          ** 2 for p in cal)
                if best is None or err < best[0]:
                    best = (err, theta)
    return best[1], len(cal), best[0]


def table(pts, theta):
    rows = []
    for p in sorted(pts, key=lambda p: (p["folder"], p["chapter"])):
        pred = predict_with(p, theta)
        # A thread cannot go faster than its share of the line.
        line_us = p["threads"] / p["line_mops"] if p.get("line_mops") else None
        if line_us:
            pred = max(pred, line_us)
        series = SERIES_US.get(p["chapter"])
        role = ("fit" if p["chapter"] in CALIBRATION else "held out" if series else
                "held out (no series number)")
        used = p["model"]
        self_pred = None
        if used and not used.get("legacy"):
            self_pred = predict_with(p, {**used, "rho": used["rho"]})
            if line_us:
                self_pred = max(self_pred, line_us)
        rows.append((p["folder"], p["chapter"], role, pred, series, p["measured_us"], self_pred))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=pathlib.Path,
                        help="tools/compare.py folders of simnic runs (results.json)")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = parser.parse_args()
    pts = []
    for folder in args.folders:
        if not (folder / "results.json").exists():
            parser.error(f"{folder}: no results.json")
        pts += points(folder)
    if not pts:
        parser.error("no counted runs in those folders")
    theta, n, err = fit(pts)
    refill = theta["rho"] * FIXED["migrate_us"] * 1000 / (1 - theta["rho"])
    print(f"fit on {n} points (chapters {', '.join(CALIBRATION)} of {len(args.folders)} "
          f"folder(s)), 3 free parameters: SIMNIC_POST_NS={theta['post_ns']} "
          f"SIMNIC_CQ_POLL_NS={theta['cq_poll_ns']} rho={theta['rho']:.2f} "
          f"(SIMNIC_REFILL_NS={refill:.0f} at SIMNIC_MIGRATE_US={FIXED['migrate_us']:g}); "
          f"fixed: doorbell {FIXED['doorbell_ns']:g} ns, CQ entry {FIXED['cq_entry_ns']:g} ns, "
          f"remote x{FIXED['remote_factor']:g}; rms log error {math.sqrt(err / n):.3f}")
    rows = table(pts, theta)
    if args.markdown:
        print()
        print("| folder | chapter | role | predicted us/WRITE | series us/WRITE | residual "
              "(predicted / series) | simulated us/WRITE | model's own accounting |")
        print("|---|---|---|---:|---:|---:|---:|---:|")
    for folder, chapter, role, pred, series, measured, self_pred in rows:
        resid = f"{pred / series:.2f}x" if series else ""
        selfs = f"{self_pred:.2f}" if self_pred else ""
        if args.markdown:
            print(f"| {folder} | {chapter} | {role} | {pred:.2f} | {series or ''} | {resid} | "
                  f"{measured:.2f} | {selfs} |")
        else:
            print(f"{folder:45s} {chapter:17s} {role:28s} predicted {pred:6.2f} us  series "
                  f"{series or '':>5}  {resid:>6}  simulated {measured:6.2f}  own "
                  f"accounting {selfs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
