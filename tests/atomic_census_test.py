"""The shared atomics of chapters 11-13, counted while they run.

Each chapter's census build (harness/atomic_census.cc) runs once over shm
with two GPU groups of one NIC each (two writer threads) and counts the
atomic operations of its server.cc. Exact, whatever the speed:
  11, 12: two atomic read-modify-writes a WRITE (the posted and finished
          counters every thread increments);
  13:     none a WRITE (a handful a transfer: warmups, finished GPUs), and
          two relaxed stores a WRITE (each GPU's own counters).
How many of them hit an atomic another thread wrote last depends on how
the threads interleaved: printed, not asserted.
"""
import os
import pathlib
import tempfile
import unittest

import counters_test

COMMON = ["--provider", "shm", "--memory", "host", "--gpus", "2", "--nics-per-gpu", "1",
          "--buffer-size", str(1 << 20)]


def census(chapter, tmp):
    """(the server's result record, its census as a dict of counts)."""
    path = tmp / f"{chapter}.census"
    record, _ = counters_test.run_chapter(chapter, tmp, common=COMMON,
                                          env={"TUTORIAL_ATOMIC_CENSUS": str(path)},
                                          server_binary="server_atomic_census")
    lines = path.read_text().splitlines()
    # The client is not a census build: the one line is the server's.
    assert len(lines) == 1, lines
    counts = dict(f.split("=", 1) for f in lines[0].split()[1:])
    return record, {k: int(v) for k, v in counts.items() if k != "pid"}


class AtomicCensusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.environ.get("TUTORIAL_SANITIZER"):
            raise unittest.SkipTest("under a sanitizer the census build is the plain server "
                                    "(//harness:sanitized)")
        cls.tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        cls.results = {c: census(c, pathlib.Path(cls.tmp.name))
                       for c in ("11_multithread", "12_pin", "13_shard")}
        for chapter, (record, counts) in cls.results.items():
            print(f"{chapter}: {record['writes']} WRITEs, " +
                  ", ".join(f"{k} {v / record['writes']:.3f} a WRITE" for k, v in counts.items()))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def per_write(self, chapter, key):
        record, counts = self.results[chapter]
        self.assertTrue(record["ok"], record)
        return counts[key] / record["writes"]

    def assertTwice(self, chapter, key):
        # Two a WRITE; the warmup's few WRITEs and the transfer's few other
        # operations move it by far less than 1%.
        self.assertAlmostEqual(self.per_write(chapter, key), 2, delta=0.01, msg=chapter)

    def test_11_and_12_update_shared_counters_twice_a_write(self):
        for chapter in ("11_multithread", "12_pin"):
            self.assertTwice(chapter, "rmw")

    def test_13_has_no_read_modify_write_a_write(self):
        self.assertLess(self.per_write("13_shard", "rmw"), 0.01)
        self.assertTwice("13_shard", "stores")
        self.assertLessEqual(self.per_write("13_shard", "cross_thread_rmw"),
                             self.per_write("13_shard", "rmw"))


if __name__ == "__main__":
    unittest.main()
