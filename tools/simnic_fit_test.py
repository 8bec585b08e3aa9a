#!/usr/bin/env python3
"""simnic_fit.py: the fit and the bounds check read recorded counters right.

The folder here is made up (a unit test of the script's arithmetic, not a
recording): chapter times are chosen so that one bound is missed and the
rest hold, and the script must say which."""
import json
import pathlib
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

    def test_bounds_name_the_missed_one(self):
        out = self.run_tool("--bounds")
        missed = [line for line in out.splitlines() if line.strip().startswith("MISSED")]
        self.assertEqual(len(missed), 1, out)
        self.assertIn("10_warmup within 1.5x of the series", missed[0])
        self.assertIn("2.00x", missed[0])
        self.assertIn("holds  11 at least 2x 12's time", out)  # 5.0 / 2.4
        self.assertIn("least room in the recordings: -0.288 (made-up-simnic: 10_warmup", out)
        self.assertIn("most room any one choice gives all of them", out)

    def test_fit_predicts_the_held_out_chapters(self):
        out = self.run_tool()
        self.assertIn("fit on 2 points (10_warmup, 12_pin of 1 folder(s)), 2 free parameters", out)
        self.assertIn("13_shard          held out", out)
        self.assertIn("14_batch          held out, at the line", out)

    def small_page_folder(self):
        """The same runs with 128-byte pages: the line allows twice the p5's
        WRITE rate there."""
        folder = pathlib.Path(self.dir.name) / "made-up-simnic-page128"
        folder.mkdir()
        records = [record(c, r, page_size=128) for c in TIME_US for r in (1, 2, 3)]
        (folder / "results.json").write_text(
            json.dumps({"meta": {"settings": {"gpus": GROUPS}}, "records": records}))
        return folder

    def test_bounds_judge_only_folders_at_the_p5_rate(self):
        small = self.small_page_folder()
        out = self.run_tool("--bounds", folders=[self.folder, small])
        self.assertIn("made-up-simnic-page128 (recorded, SIMULATED): not judged: its 128-byte "
                      "pages put its line at 2x the p5's WRITE rate", out)
        self.assertEqual(len([l for l in out.splitlines() if "MISSED" in l]), 1, out)
        out = self.run_tool("--bounds", folders=[small])
        self.assertIn("no folder at the p5's WRITE rate: nothing to judge", out)

    def test_summary_has_a_row_per_chapter_and_page(self):
        out = self.run_tool("--summary", folders=[self.folder, self.small_page_folder()])
        self.assertIn("| chapter | page | role | folders | predicted / series |", out)
        self.assertIn("| 10_warmup | 128 B | fit | 1 |", out)
        self.assertIn("| 10_warmup | 256 B | fit | 1 |", out)
        self.assertIn("| 15_lazy | 256 B | held out, at the line | 1 | 100% of line (series 97%)",
                      out)
        self.assertNotIn("made-up-simnic ", out.split("| chapter |")[1])  # no per-folder rows


if __name__ == "__main__":
    unittest.main()
