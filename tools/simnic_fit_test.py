#!/usr/bin/env python3
"""simnic_fit.py: the refit reads recorded counters right, the frozen costs
come from simnic/costs.h, and a prediction is its formula on the primitives.

The folder here is made up (a unit test of the script's arithmetic, not a
recording)."""
import json
import pathlib
import random
import subprocess
import sys
import tempfile
import unittest

TOOL = pathlib.Path(__file__).resolve().parent / "simnic_fit.py"
MODEL = ("simnic (simulated EFA-like NIC): 8 NICs x 0.391 Gbps (100 Gbps / scale 256: a 256-byte "
         "page stands for 64 KiB), tx depth 4096, calls take what they charge: post 240 ns, "
         "doorbell 200 ns, CQ read 130 ns + 40 ns an entry (x3 from the other virtual socket for "
         "post, doorbell and entries), first contact 200000 ns, lock line 150 ns, 2 virtual "
         "sockets over 2 cores, busy unpinned threads moved every 400 us with a 216000 ns refill "
         "while they outnumber one socket's 1 cores (simulated p5 scheduler), 2 engine thread(s), "
         "efa-direct rules off")
GROUPS = 2
LINE_MOPS = GROUPS * 4 * 100 / 256 * 1e9 / (8 * 256) / 1e6  # 2 x 4 NICs of 0.39 Gbps
# A thread's time per WRITE (us) of each chapter: 10 misses (2.0 > 1.5 x 1.79).
TIME_US = {"09_multinet": 2.2, "10_warmup": 2.0 * 1.79, "11_multithread": 5.0,
           "12_pin": 2.4, "13_shard": 2.3, "14_batch": GROUPS / LINE_MOPS,
           "15_lazy": GROUPS / LINE_MOPS, "16_thread_domain": GROUPS / LINE_MOPS,
           "17_op_pool": GROUPS / LINE_MOPS, "18_more": GROUPS / LINE_MOPS}


def record(chapter, run, page_size=256):
    threads = 1 if chapter in ("09_multinet", "10_warmup") else GROUPS
    writes = 1_000_000
    return {"chapter": chapter, "run": run, "ok": True, "flags": [], "writes": writes,
            "mops": threads / TIME_US[chapter], "gpus": GROUPS, "page_size": page_size,
            "link_gbps": GROUPS * 4 * 100 / 256, "post_calls": writes, "doorbells": writes,
            "cq_reads": 5 * writes, "cq_entries": writes, "model": MODEL}


class SimnicFitTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.folder = pathlib.Path(self.dir.name) / "made-up-simnic"
        self.folder.mkdir()
        records = [record(c, r) for c in TIME_US for r in (1, 2, 3)]
        (self.folder / "results.json").write_text(
            json.dumps({"meta": {"settings": {"gpus": GROUPS}}, "records": records}))

    def tearDown(self):
        self.dir.cleanup()

    def run_tool(self, *args, folders=None):
        folders = folders or [self.folder]
        done = subprocess.run([sys.executable, str(TOOL), *args, *map(str, folders)],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout

    def test_refit_reports_only_its_own_points(self):
        out = self.run_tool()
        self.assertIn("refit (an experiment beside the frozen model, not its source) on 2 points",
                      out)
        self.assertNotIn("held out", out)
        self.assertNotIn("13_shard", out)  # no prediction from a run's own time

    def test_frozen_costs_come_from_the_header(self):
        sys.path.insert(0, str(TOOL.parent))
        import simnic_fit
        costs = simnic_fit.frozen_costs()
        header = (TOOL.parent.parent / "simnic" / "costs.h").read_text()
        for name in ("kPostNs", "kDoorbellNs", "kCqPollNs", "kCqEntryNs", "kRefillNs",
                     "kMigrateUs", "kRemoteNumaFactor", "kLineGbps", "kScale"):
            self.assertIn(f"{name} = {costs[name]:g};", header)

    def test_costs_table_keeps_each_rule_to_its_own_line(self):
        out = self.run_tool("--costs")
        rows = [line for line in out.splitlines() if line.startswith("| `SIMNIC_")]
        self.assertEqual(len(rows), 14, out)
        # A rule continued under its constant is joined; the comment that
        # introduces the next constant is not.
        self.assertIn("| `SIMNIC_SCALE` | 256 | 64 KiB / 256 = 256-byte pages keep the p5's "
                      "6.1 M WRITEs/s at 1/256 of its bytes |", out)
        self.assertIn("| `SIMNIC_RX_DEPTH` | 8192 | EFA's rx_attr->size on a p5 |", out)
        self.assertNotIn("Rule:", out)

    def test_prediction_is_the_formula_on_the_primitives(self):
        prims = pathlib.Path(self.dir.name) / "prims.txt"
        prims.write_text("noise before\nsimnic_primitives {\"post_ns\": 0, \"cq_read_ns\": 0, "
                         "\"post_over_ns\": 10, \"cq_read_over_ns\": 20, \"line_ns\": 100}\n")
        out = self.run_tool("--predict", "--primitives", str(prims), "--gpus", "2",
                            "--page-size", "128", folders=[])
        sys.path.insert(0, str(TOOL.parent))
        import simnic_fit
        c = simnic_fit.frozen_costs()
        prof = simnic_fit.PROFILE["12_pin"]
        ns = (prof["app_ns"] + c["kPostNs"] + 10 + c["kDoorbellNs"] +
              prof["cq_reads"] * (c["kCqPollNs"] + 20) + c["kCqEntryNs"] + 2 * 100 * 1 / 2)
        self.assertIn(f"| 12_pin | {2 / (ns / 1000):.3f} | {ns / 1000:.2f} | its CPU |", out)
        # 11: both threads unpinned (f = 2 on the doorbell and the entry) and
        # balanced (two busy threads, one core a socket): stretched by the
        # share of their time the refills take.
        prof = simnic_fit.PROFILE["11_multithread"]
        share = simnic_fit.scheduler_share(c["kRefillNs"], c["kMigrateUs"] * 1000)
        ns = (prof["app_ns"] + c["kPostNs"] + 10 + 2 * c["kDoorbellNs"] +
              prof["cq_reads"] * (c["kCqPollNs"] + 20) + 2 * c["kCqEntryNs"] + 2 * 100 / 2)
        us = ns / (1 - share) / 1000
        self.assertIn(f"| 11_multithread | {2 / us:.3f} | {us:.2f} | its CPU |", out)

    def test_errors_again_applies_todays_model_to_recorded_primitives(self):
        sys.path.insert(0, str(TOOL.parent))
        import simnic_fit
        prims = {"post_over_ns": 10, "cq_read_over_ns": 20, "line_ns": 100}
        settings = {"gpus": 2, "nics_per_gpu": 4, "page_size": 256, "pages": 1000, "repeat": 200}
        today = simnic_fit.predict_ladder(["11_multithread"], prims, 2)["11_multithread"]["mops"]
        folder = pathlib.Path(self.dir.name) / "recorded"
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps({
            "meta": {"settings": settings, "primitives": prims},
            "rows": [{"chapter": "11_multithread", "mops_median": today / 1.05,
                      "prediction_error": -0.25}]}))
        self.assertIn("| 11_multithread | 256 B | 1 | -25% to -25% | 0 of 1 |",
                      self.run_tool("--errors", folders=[folder]))
        self.assertIn("| 11_multithread | 256 B | 1 | +5% to +5% | 1 of 1 |",
                      self.run_tool("--errors", "--again", folders=[folder]))

    def test_summary_counts_rounds_and_marks_misses(self):
        def folder(name, cpus, page, steps, errors, rates=None):
            path = pathlib.Path(self.dir.name) / name
            path.mkdir()
            rows = [{"chapter": c, "step": s, "step_noise": n, "step_verdict": v,
                     "prediction_error": errors.get(c)} for c, (s, n, v) in steps.items()]
            rows.insert(0, {"chapter": "13_shard", "prediction_error": errors.get("13_shard")})
            records = [{"chapter": c, "ok": True, "gbps": g} for c, gs in (rates or {}).items()
                       for g in gs]
            (path / "results.json").write_text(json.dumps({
                "meta": {"machine": {"cpus": cpus},
                         "settings": {"gpus": 2, "nics_per_gpu": 4, "page_size": page}},
                "rows": rows, "records": records}))
            return path
        gain, flat = (1.9, 0.02, "gain"), (1.01, 0.03, "inside the noise")
        folders = [folder("m-taskset4-r1-simnic-host-2x4-page256", 4, 256,
                          {"14_batch": gain}, {"13_shard": 0.05, "14_batch": 0.2},
                          {"13_shard": (1.0, 1.0), "14_batch": (2.0, 2.0)}),
                   folder("m-taskset4-r2-simnic-host-2x4-page256", 4, 256,
                          {"14_batch": flat}, {"13_shard": -0.01, "14_batch": 0.1},
                          {"13_shard": (1.0, 1.0), "14_batch": (2.0, 2.0)})]
        out = self.run_tool("--summary", folders=folders)
        # The rounds as compare.py judged each, then all their runs at once.
        self.assertIn("| 4 | 2 x 4 | 13 -> 14 | x1.900 ±0.020 gain | x1.010 ±0.030 inside the "
                      "noise | x2.000 ±0.000 gain | 1 of 2 | 0 of 2 |", out)
        self.assertIn("| 4 | +5.0 / -1.0 | **+20.0** / +10.0 |", out)

    def test_scheduler_share_is_what_simnics_balancer_does(self):
        # simnic/model.cc's PlaceThisThread, for one busy thread the
        # balancer keeps moving, at each call's start: past the decision
        # time, a move (its refill spun inside the call) and the next
        # decision drawn an exponential gap after this call's start. Calls
        # of 3 us over 4 s simulated; the seed keeps it the same every run.
        sys.path.insert(0, str(TOOL.parent))
        import simnic_fit
        refill, gap = 276949, 400000
        rng = random.Random(38)
        now = refilled = next_move = 0
        while now < 4_000_000_000:
            charged = 3000
            if next_move and now >= next_move:
                charged += refill
                refilled += refill
            if not next_move or now >= next_move:
                next_move = now + int(rng.expovariate(1 / gap))
            now += charged
        share = simnic_fit.scheduler_share(refill, gap)
        self.assertAlmostEqual(refilled / now, share, delta=0.02)
        # Not refill / gap: a decision that falls inside a refill waits for
        # the next call, so moves come less often than every gap.
        self.assertGreater(refill / gap - share, 0.1)
        self.assertEqual(simnic_fit.scheduler_share(0, gap), 0)


if __name__ == "__main__":
    unittest.main()
