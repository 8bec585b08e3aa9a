"""Every chapter's idea, seen in its counters.

Runs each chapter once over shm (host memory, one GPU group of two NICs, a
short request), checks that the client verified every byte, and reads the
server's result line. The counters are exact on any provider, so each
chapter's mechanism shows in them, whatever the speed:
  09-17: every accepted post rings the doorbell (no FI_MORE):
         doorbells == post_calls - eagain
  18:    FI_MORE batches: doorbells < post_calls
  14:    up to 16 WRITEs per visit of a GPU's thread: a NIC takes several
         WRITEs between two reads of its CQ (longest_write_run, a peak
         reached on the first visit, whatever the speed); until 13, one.
         (CQ reads per WRITE fall too where the writer is the limit, but
         on a crowded machine the empty reads of a waiting loop swamp it:
         measured in docs/14_batch.md, not asserted here.)
  09-16: one heap allocation per operation (the series); 17+: a pool
  16+:   FI_THREAD_DOMAIN; 09-15: FI_THREAD_SAFE
  12+:   pinned writer threads do not migrate (where the kernel reports it)
"""
import ctypes
import json
import os
import pathlib
import signal
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


def own_session():
    """In the child: a session of its own, as in two terminals (tests/process.cc
    says why), dying with the test (outside the test's process group it
    would outlive a test that Bazel kills on timeout)."""
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_chapter(chapter, tmp, common=COMMON, env=None, page_size=4096, pages=PAGES,
                tag="", server_binary="server"):
    """Server and client of one chapter (`server_binary`: a build of its
    server, :server_atomic_census say); returns (server record, client
    output)."""
    address = tmp / f"{chapter}{tag}.address"
    result = tmp / f"{chapter}{tag}.json"
    env = dict(os.environ, **(env or {}))
    server = subprocess.Popen(
        [str(RUNFILES / "chapters" / chapter / server_binary), "--once", "--repeat", str(REPEAT),
         "--address-file", str(address), "--result-json", str(result)] + common,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        preexec_fn=own_session)
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
            capture_output=True, text=True, timeout=90, env=env, preexec_fn=own_session)
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

    def test_batching_posts_several_writes_between_cq_reads(self):
        # Until 13 a visit posts one WRITE, but the warmup (10 on) posts
        # one per buffer on each NIC in one go: 2. 14's kBatchSize = 16
        # WRITEs per visit go round-robin over the group's 2 NICs: 8 on
        # each before the next visit reads the CQs, on the first visit
        # after the warmup at least (empty queues), so the peak is exact.
        expected = {"09_multinet": 1, "10_warmup": 2, "11_multithread": 2, "12_pin": 2,
                    "13_shard": 2, "14_batch": 8}
        for chapter, run in expected.items():
            self.assertEqual(self.record(chapter)["longest_write_run"], run, chapter)

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
