"""The interleaved A/B table in results/core-restructure-speed/README.md is
maint/ab_table.py's output on the recorded folders, not typed.

Reads the source tree (found through the runfiles link of ab_table.py), so
it is tagged "external": never cached.
"""
import os
import pathlib
import subprocess
import sys
import unittest


def source_root():
    runfiles = pathlib.Path(os.environ.get("TEST_SRCDIR", "")) / os.environ.get("TEST_WORKSPACE", "")
    link = runfiles / "maint" / "ab_table.py"
    path = link if link.exists() else pathlib.Path(__file__).parent / "ab_table.py"
    return path.resolve().parent.parent


class AbTableTest(unittest.TestCase):
    def test_readme_shows_the_tools_output(self):
        root = source_root()
        folder = root / "results" / "core-restructure-speed" / "interleaved"
        out = subprocess.run([sys.executable, str(root / "maint" / "ab_table.py"), str(folder)],
                             capture_output=True, text=True, check=True).stdout
        readme = (root / "results" / "core-restructure-speed" / "README.md").read_text()
        self.assertIn(out.strip(), readme)
        self.assertIn("| 12_pin | 8x4-page256 | 9 / 9 |", out)

    def check_sides(self, folder_name, sides):
        """Each side's table against `before` is in the README as the tool prints it."""
        root = source_root()
        folder = root / "results" / "core-restructure-speed" / folder_name
        readme = (root / "results" / "core-restructure-speed" / "README.md").read_text()
        for side in sides:
            out = subprocess.run([sys.executable, str(root / "maint" / "ab_table.py"), str(folder),
                                  "--after", side], capture_output=True, text=True,
                                 check=True).stdout
            self.assertIn(out.strip(), readme)
            self.assertIn(f"| runs before / {side} |", out)

    def test_readme_shows_each_side_of_the_three_builds(self):
        self.check_sides("inlined", ("lto", "now"))

    def test_readme_shows_the_split_against_before_and_now(self):
        self.check_sides("bisect", ("split", "now"))

    def test_readme_shows_todays_rounds_and_their_confirmation(self):
        self.check_sides("today", ("now",))
        self.check_sides("today/confirm-14", ("now",))

if __name__ == "__main__":
    unittest.main()
