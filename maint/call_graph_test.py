"""Chapter 14's reader reads no more than the series' 14_batch.cpp would
make them read (maint/call_graph.py walks clang's AST and says what counts),
and docs/maintaining.md shows the tool's own output.

Reads the source tree (found through the runfiles link of call_graph.py)
and runs clang++ on it, so it is tagged "external": never cached.
"""
import os
import pathlib
import subprocess
import sys
import unittest


def source_root():
    runfiles = pathlib.Path(os.environ.get("TEST_SRCDIR", "")) / os.environ.get("TEST_WORKSPACE", "")
    link = runfiles / "maint" / "call_graph.py"
    path = link if link.exists() else pathlib.Path(__file__).parent / "call_graph.py"
    return path.resolve().parent.parent


sys.path.insert(0, str(source_root() / "maint"))
import call_graph  # noqa: E402


class CallGraphTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = call_graph.measure(str(source_root()), "14_batch")

    def test_within_the_limits(self):
        for key, limit in call_graph.LIMITS.items():
            self.assertIsNotNone(self.m[key], key)
            self.assertLessEqual(self.m[key], limit, key)

    def test_the_posting_loop_reaches_fi_writemsg_in_plain_sight(self):
        path = self.m["post_path"]
        self.assertEqual(path[0], "RandomFillWriter::ContinuePostWrite")
        self.assertEqual(path[-1], "fi_writemsg")
        # The post itself is the core's, not a wrapper's or a lambda's.
        self.assertTrue(path[-2].startswith("Network::"), path)
        self.assertEqual(self.m["callback_path"][-1], "callback")

    def test_the_walk_reaches_private_members_and_stops_at_the_harness(self):
        defs = "\n".join(self.m["definitions"])
        for name in ["Network::Post", "Network::tx_depth_", "Network::Finish", "RdmaOp::callback",
                     "NetworkGroup::GetNext", "WriteJob::MakeWrite"]:
            self.assertIn(name, defs)
        self.assertFalse([p for p in self.m["parts"] if p.startswith("harness/")])

    def test_readme_shows_todays_output(self):
        text = (source_root() / "docs" / "maintaining.md").read_text()
        section = text.split("## How much there is to read")[1].split("\n## ")[0]
        self.assertIn(call_graph.report(self.m, line_ranges=False), section)

    def test_no_core_header_or_chapter_includes_the_harness(self):
        root = source_root()
        files = list((root / "common").glob("*.h")) + list((root / "chapters").glob("*/*.cc"))
        for path in files:
            self.assertNotIn('#include "harness/', path.read_text(), path)
        self.assertNotIn("friend", (root / "common" / "network.h").read_text())


if __name__ == "__main__":
    unittest.main()
