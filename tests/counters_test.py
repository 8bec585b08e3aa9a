"""Every chapter's idea, seen in its counters (issue 15).

Runs each chapter once over shm (host memory, one GPU group of two NICs, a
short request), checks that the client verified every byte, and reads the
server's result line. The counters are exact on any provider, so each
chapter's mechanism shows in them, whatever the speed:
  09-17: every accepted post rings the doorbell (no FI_MORE):
         doorbells == post_calls - eagain
  18:    FI_MORE batches: doorbells < post_calls
  14:    16 WRITEs per visit: fewer CQ reads per WRITE than 13 (over simnic
         with an unlimited line rate, so that the writer, not the NIC or
         the peer, is the bottleneck: then every visit reads every CQ once)
  09-16: one heap allocation per operation (the series); 17+: a pool
  16+:   FI_THREAD_DOMAIN; 09-15: FI_THREAD_SAFE
  12+:   pinned writer threads do not migrate (where the kernel reports it)
"""
import json
import os
import pathlib
import subprocess
import tempfile
import time
import unittest

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
CHAPTERS = ["09_multinet", "10_warmup", "11_multithread", "12_pin", "13_shard", "14_batch",
            "15_lazy", "16_thread_domain", "17_op_pool", "18_more"]
PAGES = 200
REPEAT = 20
COMMON = ["--provider", "shm", "--memory", "host", "--gpus", "1", "--nics-per-gpu", "2",
          "--buffer-size", str(1 << 20)]


# simnic (docs/simnic.md) with a line rate no CPU can reach: only the
# writer's own loop limits the WRITE rate.
SIMNIC = ["--provider", "simnic", "--memory", "host", "--gpus", "1", "--nics-per-gpu", "2",
          "--buffer-size", str(1 << 20)]
SIMNIC_ENV = {"FI_PROVIDER_PATH": str(RUNFILES / "simnic"), "SIMNIC_NICS": "2",
              "SIMNIC_LINE_GBPS": "100000", "SIMNIC_QUIET": "1"}


def run_chapter(chapter, tmp, common=COMMON, env=None, page_size=4096, pages=PAGES,
                tag=""):
    """Server and client of one chapter; returns (server record, client output)."""
    address = tmp / f"{chapter}{tag}.address"
    result = tmp / f"{chapter}{tag}.json"
    env = dict(os.environ, **(env or {}))
    server = subprocess.Popen(
        [str(RUNFILES / "chapters" / chapter / "server"), "--once", "--repeat", str(REPEAT),
         "--address-file", str(address), "--result-json", str(result)] + common,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 30
        while not (address.exists() and address.read_text().strip()):
            if time.monotonic() > deadline or server.poll() is not None:
                raise AssertionError(f"{chapter}: no server address\n{server.communicate()[0]}")
            time.sleep(0.05)
        client = subprocess.run(
            [str(RUNFILES / "chapters" / chapter / "client"), "--server",
             address.read_text().strip(), "--page-size", str(page_size), "--pages", str(pages),
             "--seed", "7", "--timeout", "60"] + common,
            capture_output=True, text=True, timeout=90, env=env)
        out, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    if client.returncode != 0 or not result.exists():
        raise AssertionError(f"{chapter}: client {client.returncode}\n{client.stdout}"
                             f"{client.stderr}\nserver:\n{out}")
    return json.loads(result.read_text().splitlines()[-1]), client.stdout


class CountersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        cls.records = {}
        cls.failures = {}
        tmp = pathlib.Path(cls.tmp.name)
        for chapter in CHAPTERS:
            try:
                cls.records[chapter], _ = run_chapter(chapter, tmp)
            except (AssertionError, subprocess.TimeoutExpired) as e:
                cls.failures[chapter] = str(e)
        cls.fast = {}
        for chapter in ("13_shard", "14_batch"):
            try:
                cls.fast[chapter], _ = run_chapter(chapter, tmp, SIMNIC, SIMNIC_ENV, 64, 1000,
                                                   "-simnic")
            except (AssertionError, subprocess.TimeoutExpired) as e:
                cls.failures[chapter + " over simnic"] = str(e)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def record(self, chapter):
        self.assertNotIn(chapter, self.failures, self.failures.get(chapter))
        return self.records[chapter]

    def test_every_chapter_ran_and_counted_its_writes(self):
        # 2 buffers x PAGES pages x REPEAT repeats, plus warmup WRITEs (one per
        # NIC and buffer, from chapter 10 on).
        timed = 2 * PAGES * REPEAT
        for chapter in CHAPTERS:
            r = self.record(chapter)
            self.assertTrue(r["ok"], r)
            warmup = 0 if chapter == "09_multinet" else 2 * 2
            self.assertEqual(r["writes"], timed + warmup, chapter)
            self.assertGreaterEqual(r["cq_entries"], r["writes"], chapter)
            self.assertLessEqual(r["cq_empty_reads"], r["cq_reads"], chapter)
            self.assertGreaterEqual(r["post_calls"], r["writes"], chapter)
            self.assertEqual(r["post_calls"] - r["eagain"], r["writes"], chapter)
            for key in ("ns_per_write_provider", "ns_per_write_app", "involuntary_switches"):
                self.assertGreaterEqual(r[key], 0, (chapter, key))

    def test_no_fi_more_before_chapter_18(self):
        for chapter in CHAPTERS[:-1]:
            r = self.record(chapter)
            # A refused post rings nothing: every accepted post rings.
            self.assertEqual(r["doorbells"], r["post_calls"] - r["eagain"], chapter)
            self.assertFalse(r["doorbell_batching"], chapter)

    def test_chapter_18_rings_fewer_doorbells_than_it_posts(self):
        r = self.record("18_more")
        self.assertTrue(r["doorbell_batching"])
        self.assertLess(r["doorbells"], r["post_calls"], r)

    def test_batching_reads_the_cq_less_often_per_write(self):
        for chapter in ("13_shard", "14_batch"):
            self.assertNotIn(chapter + " over simnic", self.failures)
        per_write = {c: self.fast[c]["cq_reads"] / self.fast[c]["writes"]
                     for c in ("13_shard", "14_batch")}
        # 13 reads both NICs' CQs once per WRITE at least; 14 once per 16
        # WRITEs, plus the empty reads of a loop that waits (more of them on a
        # loaded machine: 14 measured 0.2 to 0.53 of 13).
        self.assertGreaterEqual(per_write["13_shard"], 2.0, per_write)
        self.assertLess(per_write["14_batch"], per_write["13_shard"] * 0.8, per_write)

    def test_threading_level_is_the_series_until_16(self):
        for chapter in CHAPTERS:
            expected = ("FI_THREAD_DOMAIN" if chapter >= "16" else "FI_THREAD_SAFE")
            self.assertEqual(self.record(chapter)["threading"], expected, chapter)

    def test_one_allocation_per_operation_until_the_pool(self):
        for chapter in CHAPTERS:
            r = self.record(chapter)
            if chapter >= "17":
                self.assertTrue(r["op_pool"], chapter)
                self.assertLess(r["op_allocations"], 16, (chapter, r["op_allocations"]))
            else:
                self.assertFalse(r["op_pool"], chapter)
                self.assertGreaterEqual(r["op_allocations"], r["writes"], chapter)

    def test_pinned_threads_stay_put(self):
        for chapter in CHAPTERS[3:]:  # 12_pin on
            r = self.record(chapter)
            if r["migrations"] is None:
                self.skipTest(f"the kernel does not report migrations ({chapter})")
            # The pinning itself may move the thread once.
            self.assertLessEqual(r["migrations"], 1, (chapter, r["migrations"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
