"""Unit tests of tools/run_chapter.py's messages (no chapter is run)."""
import pathlib
import sys
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


if __name__ == "__main__":
    unittest.main()
