"""Unit tests of tools/run_chapter.py's messages (no chapter is run)."""
import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run_chapter  # noqa: E402


class ReasonTest(unittest.TestCase):
    def test_a_failed_transfer_is_quoted_not_the_wait_for_the_next_client(self):
        lines = ["Started RDMA WRITE to the remote memory.\n",
                 "Transfer abandoned: the client is likely gone; rebuilt every endpoint\n",
                 "------\n", "Waiting for a client (Ctrl-C to stop).\n", "\n"]
        self.assertEqual(run_chapter.reason(lines),
                         "Transfer abandoned: the client is likely gone; rebuilt every endpoint")

    def test_an_error_line_wins_over_later_lines(self):
        lines = ["client: fi_getinfo failed: No data available (-61)\n", "Bye.\n"]
        self.assertEqual(run_chapter.reason(lines),
                         "client: fi_getinfo failed: No data available (-61)")

    def test_without_a_reason_the_last_line_that_is_not_framing(self):
        self.assertEqual(run_chapter.reason(["Filled 2 buffer(s).\n", "------\n"]),
                         "Filled 2 buffer(s).")
        self.assertEqual(run_chapter.reason([]), "")


class AtomicCensusTest(unittest.TestCase):
    def test_the_servers_census_line_becomes_counters_per_write(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "atomic-census"
            path.write_text("atomic-census pid=7 rmw=1 stores=0 cross_thread_writes=0 "
                            "cross_thread_rmw=0\n"
                            "atomic-census pid=42 rmw=200 stores=4 cross_thread_writes=150 "
                            "cross_thread_rmw=150\n")
            counts = run_chapter.census_counts(path, 42)
            self.assertEqual(run_chapter.census_counts(pathlib.Path(tmp) / "none", 42), {})
        self.assertEqual(counts, {"atomic_rmw": 200, "atomic_stores": 4,
                                  "cross_thread_atomic_writes": 150})
        text = run_chapter.counters_text(dict(counts, chapter="12_pin", writes=100))
        self.assertIn("atomic_rmw", text)
        self.assertIn("2.000 per WRITE   (200 in all)", text)
        self.assertIn("1.500 per WRITE   (150 in all)", text)


if __name__ == "__main__":
    unittest.main()
