"""maint/leftovers.py on folders of the test's own."""
import os
import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import leftovers  # noqa: E402


class LeftoversTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(tmp.cleanup)
        self.base = pathlib.Path(tmp.name)
        self.roots = [self.base / "a", self.base / "b"]
        for root in self.roots:
            root.mkdir()
        (self.roots[0] / "old").write_text("")
        self.snapshot = self.base / "snapshot.txt"
        roots = [str(r) for r in self.roots]
        self.run_tool = lambda action: leftovers.main([action, str(self.snapshot), "--roots"] +
                                                      roots)
        self.assertEqual(self.run_tool("snapshot"), 0)

    def test_nothing_new_passes(self):
        self.assertEqual(self.run_tool("check"), 0)

    def test_a_new_folder_or_file_fails(self):
        (self.roots[1] / "dying_peers_x").mkdir()
        self.assertEqual(self.run_tool("check"), 1)

    def test_what_went_away_is_no_leftover(self):
        (self.roots[0] / "old").unlink()
        self.assertEqual(self.run_tool("check"), 0)


if __name__ == "__main__":
    unittest.main()
