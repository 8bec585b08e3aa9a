"""tools/compare.py leaves the checkout clean unless asked to record (issue 18).

Runs compare.py's main() in a temporary git copy of the checkout (chapters,
docs, results, tools, .gitignore), with run_chapter.run_once replaced by a
stub that returns a made-up server record: what is checked is where compare
writes, not what a chapter measures (the end-to-end tests run the chapters).
The made-up numbers never leave the temporary copy.

The copy is taken from the source tree (found through the runfiles link of
this file), so the test is tagged "external", as //docs:docs_check_test is.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

MACHINE = "compare-test-box"
NAME = f"{MACHINE}-shm-host"
CHAPTERS = ["09_multinet", "10_warmup"]

# Imports compare.py from the copy, stubs the runner, runs main().
DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1] + "/tools")
    import compare, run_chapter

    def fake_run_once(args, chapter, echo=True):
        gbps = 10.0 + len(chapter)
        return {"chapter": chapter, "ok": True, "gbps": gbps, "mops": gbps / 0.524288 / 1e3,
                "seconds": 1.0, "libfabric": "1.17 (stub)", "provider": args.provider,
                "memory": args.memory, "command": "server --once"}

    run_chapter.run_once = fake_run_once
    sys.argv = ["tools/compare.py"] + sys.argv[2:]
    sys.exit(compare.main())
""")


def source_root():
    here = pathlib.Path(__file__)
    runfiles = pathlib.Path(os.environ.get("TEST_SRCDIR", "")) / os.environ.get("TEST_WORKSPACE",
                                                                                 "")
    link = runfiles / "tools" / "compare.py"
    path = link if link.exists() else here.parent / "compare.py"
    return path.resolve().parent.parent


def git(root, *args):
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=True).stdout


class CompareLeavesCheckoutCleanTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.root = pathlib.Path(self.tmp.name) / "checkout"
        src = source_root()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for part in ("chapters", "docs", "results", "tools"):
            shutil.copytree(src / part, self.root / part, ignore=ignore)
        shutil.copy2(src / ".gitignore", self.root / ".gitignore")
        git(self.root, "init", "-q")
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", "copy")
        self.driver = pathlib.Path(self.tmp.name) / "driver.py"
        self.driver.write_text(DRIVER)
        self.bin_dir = pathlib.Path(self.tmp.name) / "bin"  # never used: the runner is a stub
        self.bin_dir.mkdir()

    def tearDown(self):
        self.tmp.cleanup()

    def compare(self, *flags):
        env = dict(os.environ, COMPARE_PLOT_REEXEC="1")  # no second python for the plot
        return subprocess.run([sys.executable, str(self.driver), str(self.root), *flags],
                              capture_output=True, text=True, timeout=120, env=env,
                              cwd=self.root)

    def measure(self, *flags):
        return self.compare("--machine", MACHINE, "--runs", "1", "--chapters", *CHAPTERS,
                            "--bin-dir", str(self.bin_dir), *flags)

    def status(self):
        return git(self.root, "status", "--porcelain", "--untracked-files=all")

    def docs_check(self):
        return subprocess.run([sys.executable, str(self.root / "tools" / "docs_diff.py"),
                               "--check", "--root", str(self.root)], capture_output=True,
                              text=True, timeout=120)

    def test_a_plain_run_changes_no_tracked_file(self):
        result = self.measure()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(self.status(), "")
        out = self.root / "out" / "results" / NAME
        for name in ("results.md", "results.csv", "results.json"):
            self.assertTrue((out / name).exists(), name)
        self.assertFalse((self.root / "results" / NAME).exists())
        self.assertIn(f"the new results are in out/results/{NAME}/", result.stdout)
        self.assertIn(f"python3 tools/compare.py --record-from out/results/{NAME}",
                      result.stdout)

    def test_a_second_plain_run_leaves_a_recorded_folder_alone(self):
        recorded = sorted((self.root / "results").glob("*/results.json"))[0].parent
        before = (recorded / "results.json").read_text()
        result = self.measure("--machine", recorded.name.rsplit("-shm-host", 1)[0])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual((recorded / "results.json").read_text(), before)
        self.assertEqual(self.status(), "")

    def test_out_under_results_needs_record(self):
        result = self.measure("--out", "results/somewhere")
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertIn("add --record", result.stderr.strip().splitlines()[-1])
        self.assertEqual(self.status(), "")

    def test_record_from_copies_the_folder_and_refreshes_the_docs(self):
        self.assertEqual(self.measure().returncode, 0)
        result = self.compare("--record-from", f"out/results/{NAME}")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        changed = self.status()
        self.assertIn(f"?? results/{NAME}/results.json", changed)
        self.assertIn(" M docs/README.md", changed)
        self.assertIn(" M results/README.md", changed)
        self.assertIn(f"[{NAME}](../results/{NAME}/results.md)",
                      (self.root / "docs" / "README.md").read_text())
        checked = self.docs_check()
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)

    def test_record_writes_results_and_docs_at_once(self):
        result = self.measure("--record")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn(f"?? results/{NAME}/results.json", self.status())
        self.assertFalse((self.root / "out").exists())
        checked = self.docs_check()
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)

    def test_record_from_a_folder_that_is_not_a_recording(self):
        result = self.compare("--record-from", "docs")
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertIn("--record-from: docs/results.json is not a compare.py folder",
                      result.stderr.strip().splitlines()[-1])
        self.assertEqual(self.status(), "")


if __name__ == "__main__":
    unittest.main()
