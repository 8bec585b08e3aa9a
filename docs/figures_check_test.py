"""Checks that docs/figures/*.svg are what maint/make_figures.py makes from the code.

Runs make_figures.py --check on the source tree (found through the runfiles
link of docs/README.md, as //docs:docs_check_test does) with the
topology_dump binary Bazel built, and makes sure that the check does catch a
figure that no longer matches.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]


def source_root():
    return (RUNFILES / "docs" / "README.md").resolve().parent.parent


def make_figures(*flags):
    return subprocess.run([sys.executable, str(source_root() / "maint" / "make_figures.py"),
                           "--root", str(source_root()), "--topology-dump",
                           str(RUNFILES / "tools" / "topology_dump"), *flags],
                          capture_output=True, text=True, timeout=120)


class FiguresCheckTest(unittest.TestCase):
    def test_figures_match_the_code(self):
        result = make_figures("--check")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_check_catches_a_drifted_figure(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "figures"
            shutil.copytree(source_root() / "docs" / "figures", out)
            svg = out / "p5_layout.svg"
            svg.write_text(svg.read_text().replace("rdmap79s0", "rdmap80s0", 1))
            result = make_figures("--check", "--out", str(out))
            self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
            self.assertIn("p5_layout.svg in", result.stdout)
            self.assertNotIn("timeline.svg", result.stdout)

    def test_the_p5_layout_comes_from_the_fixture(self):
        text = (source_root() / "docs" / "figures" / "p5_layout.svg").read_text()
        # GPU 7 behind the switch of bus ca, with the EFA NICs on buses c6-c9
        # (tests/fixtures/p5-lspci.txt), and the last 12 of 96 cores.
        self.assertIn("GPU 7: H100 SXM5 80GB", text)
        self.assertIn("0000:ca:00.0", text)
        for bus in ("c6", "c7", "c8", "c9"):
            self.assertIn(f"0000:{bus}:00.0", text)
        self.assertIn("cores 84-95", text)

    def test_pages_link_the_figures(self):
        docs = source_root() / "docs"
        linked = "".join((docs / page).read_text() for page in
                         ("00_concepts.md", "README.md", "running-on-p5.md"))
        for name in ("p5_layout.svg", "data_flow.svg", "timeline.svg", "cpu_per_write.svg"):
            self.assertIn(f"figures/{name}", linked)

    def test_pending_figures_are_listed(self):
        result = make_figures("--pending")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("none is pending", result.stdout)

    def test_the_cpu_picture_comes_from_the_recorded_counters_and_says_simulated(self):
        text = (source_root() / "docs" / "figures" / "cpu_per_write.svg").read_text()
        self.assertIn("SIMULATED: what a writer thread", text)
        self.assertIn("(simulated)", text)
        # 18_more's doorbells per WRITE and 14_batch's CQ reads, from the
        # recorded folder's results.csv.
        self.assertIn("doorbells 1.00 -&gt; 0.25", text)
        self.assertIn("CQ reads 5.54 -&gt; 0.79", text)
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            for part in ("docs/figures", "results", "common", "chapters", "tests/fixtures"):
                shutil.copytree(source_root() / part, root / part,
                                ignore=shutil.ignore_patterns("*.png", "*.json", "*.jsonl"))
            csv = root / "results" / "h200x2-32core-simnic-host-8x4-page256" / "results.csv"
            csv.write_text(csv.read_text().replace(",0.2500,", ",0.5000,", 1))
            result = subprocess.run(
                [sys.executable, str(source_root() / "maint" / "make_figures.py"), "--root",
                 str(root), "--topology-dump", str(RUNFILES / "tools" / "topology_dump"),
                 "--check"], capture_output=True, text=True, timeout=120)
            self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
            self.assertIn("cpu_per_write.svg in", result.stdout)

    def test_a_missing_topology_dump_is_one_line(self):
        result = subprocess.run([sys.executable,
                                 str(source_root() / "maint" / "make_figures.py"),
                                 "--root", str(source_root()), "--check",
                                 "--topology-dump", "/nonexistent/topology_dump"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertIn("bazel build //tools:topology_dump", result.stderr)


if __name__ == "__main__":
    unittest.main()
