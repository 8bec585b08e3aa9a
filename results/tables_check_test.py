"""Checks that every GPU results table is what maint/gpu_tables.py makes from
the raw records beside it: the numbers are measured, never typed in.

Runs maint/gpu_tables.py --check on each folder whose results.md names the
tool, and makes sure that the check does catch an edited number.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
TOOL = RUNFILES / "maint" / "gpu_tables.py"


def table_folders():
    return sorted(md.parent for md in (RUNFILES / "results").rglob("results.md")
                  if "maint/gpu_tables.py" in md.read_text())


def check(folders):
    return subprocess.run([sys.executable, str(TOOL), "--check"] + [str(f) for f in folders],
                          capture_output=True, text=True)


class TablesCheckTest(unittest.TestCase):
    def test_tables_match_their_records(self):
        folders = table_folders()
        self.assertGreater(len(folders), 0, "no GPU results folder found")
        result = check(folders)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_check_catches_an_edited_number(self):
        folder = table_folders()[0]
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp) / "folder"
            copy.mkdir()
            for name in ("results.md", "results.csv", "records.jsonl"):
                shutil.copy(folder / name, copy / name)
            md = (copy / "results.md").read_text()
            row = next(line for line in md.splitlines() if line.startswith("| 1"))
            cells = row.split(" | ")
            cells[-3 if len(cells) > 4 else 1] = "9999.9"
            (copy / "results.md").write_text(md.replace(row, " | ".join(cells)))
            result = check([copy])
            self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
            self.assertIn("results.md differs", result.stdout)


if __name__ == "__main__":
    unittest.main()
