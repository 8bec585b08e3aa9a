"""tools/compare.py leaves the checkout clean unless asked to record,
keeps the counters' medians per chapter, and labels a simulated
NIC's numbers "simulated" (simnic).

Runs compare.py's main() in a temporary git copy of the checkout (chapters,
docs, maint, results, tools, .gitignore), with run_chapter.run_once replaced by a
stub that returns a made-up server record: what is checked is where compare
writes, not what a chapter measures (the end-to-end tests run the chapters).
The made-up numbers never leave the temporary copy.

The copy is taken from the source tree (found through the runfiles link of
this file), so the test is tagged "external", as //docs:docs_check_test is.
"""
import csv
import json
import math
import os
import pathlib
import shutil
import statistics
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

    RUNS = {}

    def fake_run_once(args, chapter, echo=True):
        gbps = 10.0 + len(chapter)
        run = RUNS[chapter] = RUNS.get(chapter, 0) + 1  # 1, 2, 3...
        writes = 1000
        return {"chapter": chapter, "ok": True, "gbps": gbps, "mops": gbps / 0.524288 / 1e3,
                "seconds": 1.0, "libfabric": "1.17", "libfabric_version": "1.17.0stub",
                "libfabric_path": "/stub/lib/libfabric.so.1", "provider": args.provider,
                "memory": args.memory, "command": "server --once",
                # counters: run r posts (1 + r/10) calls per WRITE, and so on
                "writes": writes, "post_calls": writes + 100 * run,
                "doorbells": writes // 2 * run, "eagain": 100 * run, "cq_reads": 250 * run,
                "cq_empty_reads": 10, "cq_entries": writes, "op_allocations": 2 * run,
                "migrations": None if run == 2 else run, "involuntary_switches": 3 * run,
                "ns_per_write_provider": 100.0 * run, "ns_per_write_app": 50.0 * run}

    # The simulated NIC's provider name, before run_chapter knows it.
    add_run_flags = run_chapter.add_run_flags

    def add_run_flags_with_simnic(parser):
        add_run_flags(parser)
        for action in parser._actions:
            if "--provider" in action.option_strings and "simnic" not in action.choices:
                action.choices = list(action.choices) + ["simnic"]

    run_chapter.run_once = fake_run_once
    run_chapter.add_run_flags = add_run_flags_with_simnic
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
        # What maint/docs_diff.py reads (the pages' values read harness/ too).
        for part in ("chapters", "common", "docs", "harness", "maint", "results", "simnic",
                     "tests", "tools"):
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
        return subprocess.run([sys.executable, str(self.root / "maint" / "docs_diff.py"),
                               "--check", "--root", str(self.root)], capture_output=True,
                              text=True, timeout=120)

    def test_a_plain_run_changes_no_tracked_file(self):
        result = self.measure()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(self.status(), "")
        self.check_libfabric_named(result)
        out = self.root / "out" / "results" / NAME
        for name in ("results.md", "results.csv", "results.json"):
            self.assertTrue((out / name).exists(), name)
        self.assertFalse((self.root / "results" / NAME).exists())
        self.assertIn(f"the new results are in out/results/{NAME}/", result.stdout)
        self.assertIn(f"python3 tools/compare.py --record-from out/results/{NAME}",
                      result.stdout)

    def check_libfabric_named(self, result):
        """The results name the libfabric the chapters ran on: its version and
        the file the loader took, as the chapters report them, not the
        fi_info on PATH (which may be another libfabric)."""
        out = self.root / "out" / "results" / NAME
        meta = json.loads((out / "results.json").read_text())["meta"]
        self.assertEqual(meta["libfabric_build"], "1.17.0stub")
        self.assertEqual(meta["libfabric_path"], "/stub/lib/libfabric.so.1")
        self.assertIn("- libfabric: 1.17 (1.17.0stub), loaded from `/stub/lib/libfabric.so.1`",
                      (out / "results.md").read_text())
        with open(out / "results.csv") as f:
            rows = list(csv.DictReader(f))
        self.assertEqual({r["libfabric_path"] for r in rows}, {"/stub/lib/libfabric.so.1"})
        self.assertIn("libfabric 1.17.0stub from /stub/lib/libfabric.so.1", result.stdout)

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
        self.assertIn(" M results/README.md", changed)
        self.assertIn(f"[{NAME}]({NAME}/results.md)",
                      (self.root / "results" / "README.md").read_text())
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

    def test_counters_are_medians_per_chapter(self):
        result = self.measure("--runs", "3")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        out = self.root / "out" / "results" / NAME
        with open(out / "results.csv", newline="") as f:
            rows = {r["chapter"]: r for r in csv.DictReader(f)}
        row = rows["10_warmup"]
        # Runs 1, 2, 3: the medians are run 2's, per WRITE where it teaches.
        self.assertAlmostEqual(float(row["post_calls_per_write"]), 1.2)
        self.assertAlmostEqual(float(row["doorbells_per_write"]), 1.0)
        self.assertAlmostEqual(float(row["eagain_per_write"]), 0.2)
        self.assertAlmostEqual(float(row["cq_reads_per_write"]), 0.5)
        self.assertAlmostEqual(float(row["op_allocations_per_write"]), 0.004)
        self.assertAlmostEqual(float(row["ns_per_write_provider"]), 200.0)
        self.assertAlmostEqual(float(row["ns_per_write_app"]), 100.0)
        self.assertAlmostEqual(float(row["involuntary_switches"]), 6.0)
        # Run 2 reported no migrations: the median of runs 1 and 3.
        self.assertAlmostEqual(float(row["migrations"]), 2.0)
        self.assertEqual(row["kind"], "measured")
        md = (out / "results.md").read_text()
        self.assertIn("| chapter | post calls / WRITE | doorbells / WRITE |", md)
        self.assertIn("| 10_warmup | 1.200 | 1.000 | 0.500 | 0.2000 | 0.0040 | 200.0 | 100.0 "
                      "| 2 | 6 |", md)
        self.assertNotIn("SIMULATED", md)
        data = json.loads((out / "results.json").read_text())
        self.assertFalse(data["meta"]["simulated"])
        self.assertAlmostEqual(data["rows"][0]["doorbells_per_write"], 1.0)

    def test_a_record_without_counters_leaves_their_cells_empty(self):
        sys.path.insert(0, str(self.root / "tools"))
        import compare  # noqa: E402
        rows = compare.summarize([{"chapter": "09_multinet", "ok": True, "gbps": 1.0,
                                   "mops": 0.1, "seconds": 1.0}], ["09_multinet"])
        self.assertNotIn("doorbells_per_write", rows[0])
        self.assertIn("| 09_multinet |  |  |", compare.counters_table(rows))

    def test_flagged_runs_are_kept_but_not_counted(self):
        sys.path.insert(0, str(self.root / "tools"))
        import compare  # noqa: E402
        records = [{"chapter": "12_pin", "ok": True, "gbps": g, "mops": g, "seconds": 1.0,
                    "flags": f} for g, f in ((1.0, []), (9.0, ["preempted"]), (3.0, []))]
        rows = compare.summarize(records, ["12_pin"])
        self.assertEqual(rows[0]["runs_ok"], 2)
        self.assertEqual(rows[0]["runs_flagged"], 1)
        self.assertEqual(rows[0]["gbps_median"], 2.0)
        self.assertIn("1 flagged: preempted; not counted", compare.markdown_table(rows))

    def test_the_census_runs_counts_go_beside_the_timed_medians(self):
        sys.path.insert(0, str(self.root / "tools"))
        import compare  # noqa: E402
        timed = [{"chapter": c, "ok": True, "gbps": 1.0, "mops": 1.0, "seconds": 1.0,
                  "writes": 100, "post_calls": 100} for c in ("12_pin", "13_shard")]
        census = [{"chapter": "12_pin", "ok": True, "writes": 50, "post_calls": 999,
                   "atomic_rmw": 100, "atomic_stores": 0, "cross_thread_atomic_writes": 80},
                  {"chapter": "13_shard", "ok": True, "writes": 50, "atomic_rmw": 0,
                   "atomic_stores": 100, "cross_thread_atomic_writes": 0}]
        rows = compare.summarize(timed, ["12_pin", "13_shard"], census)
        self.assertEqual(rows[0]["atomic_rmw_per_write"], 2.0)
        self.assertEqual(rows[0]["cross_thread_atomic_writes_per_write"], 1.6)
        self.assertEqual(rows[0]["post_calls_per_write"], 1.0)  # the timed runs' alone
        self.assertEqual(rows[1]["atomic_stores_per_write"], 2.0)
        self.assertIn("| 12_pin | 2.000 | 0.000 | 1.600 |", compare.census_text(rows))
        self.assertEqual(compare.census_text(compare.summarize(timed, ["12_pin"])), "")

    def test_steps_say_whether_they_are_beyond_the_noise(self):
        sys.path.insert(0, str(self.root / "tools"))
        import compare  # noqa: E402
        runs = {"12_pin": (1.0, 1.02, 0.98), "13_shard": (1.01, 1.03, 0.99),
                "14_batch": (2.0, 2.02, 1.98), "15_lazy": (1.5, 1.51, 1.49)}
        records = [{"chapter": c, "ok": True, "gbps": g, "mops": g, "seconds": 1.0}
                   for c, gs in runs.items() for g in gs]
        rows = compare.summarize(records, list(runs))
        compare.add_steps(rows, records)
        self.assertEqual([r.get("step_verdict") for r in rows],
                         [None, "inside the noise", "gain", "LOSS"])
        # Welch: equal spreads, 3 runs a side: 4 degrees of freedom.
        a = [math.log(g) for g in runs["12_pin"]]
        b = [math.log(g) for g in runs["13_shard"]]
        se = math.sqrt(statistics.variance(a) / 3 + statistics.variance(b) / 3)
        self.assertAlmostEqual(rows[1]["step_noise"], 2.776 * se, places=4)
        self.assertIn(f"| 12 -> 13 | x1.010 | ±{2.776 * se:.3f} | inside the noise |",
                      compare.steps_table(rows))
        compare.add_predictions(rows, {"14_batch": {"mops": 2.2}})
        self.assertIn("| 14_batch | 2.200 | 2.000 | +10.0% |", compare.predictions_table(rows))

    def test_more_runs_shrink_a_steps_uncertainty(self):
        sys.path.insert(0, str(self.root / "tools"))
        import compare  # noqa: E402
        few = compare.step_between([0.0, 0.03, -0.03], [0.04, 0.07, 0.01])
        many = compare.step_between([0.0, 0.03, -0.03] * 4, [0.04, 0.07, 0.01] * 4)
        self.assertAlmostEqual(few[0], many[0])
        self.assertLess(many[1], few[1] / 2)
        self.assertGreater(few[1], 0.04)   # a +4% step inside the noise with 3 runs
        self.assertLess(many[1], 0.04)     # and beyond it with 12

    def test_cpu_limited_runs_follow_the_smallest_predicted_step(self):
        sys.path.insert(0, str(self.root / "tools"))
        import compare  # noqa: E402
        pred = {c: {"mops": m} for c, m in (("14_batch", 1.0), ("15_lazy", 1.5),
                                             ("16_thread_domain", 1.5), ("17_op_pool", 1.8),
                                             ("18_more", 2.2))}
        self.assertEqual(compare.runs_for_steps(pred), (3, ("16_thread_domain", "17_op_pool",
                                                            1.2)))
        pred["17_op_pool"]["mops"] = 1.53
        n, smallest = compare.runs_for_steps(pred)
        self.assertEqual(smallest[:2], ("16_thread_domain", "17_op_pool"))
        self.assertTrue(3 < n <= 36)
        self.assertEqual(compare.runs_for_steps(None), (36, None))

    def test_simnic_layout_fits_the_cpus(self):
        sys.path.insert(0, str(self.root / "tools"))
        import run_chapter  # noqa: E402
        # CPUs that sysfs does not describe count as one core each.
        for cpus, gpus, engines in ((16, 8, 3), (8, 4, 2), (4, 2, 1), (2, 1, 1)):
            got = run_chapter.simnic_layout(256, 4, list(range(1000, 1000 + cpus)))
            self.assertEqual(got[:2], (gpus, engines), cpus)
            # engines stay off the writers' cores (the middle core of each slice)
            pinned = set(run_chapter.writer_cpus([[c] for c in range(1000, 1000 + cpus)], gpus))
            self.assertFalse(pinned & set(got[2]))

    def test_a_simulated_run_is_labelled_simulated(self):
        result = self.measure("--provider", "simnic", "--gpus", "2")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        # simnic's defaults: 4 NICs per group and 256-byte pages.
        name = f"{MACHINE}-simnic-host-2x4-page256"
        out = self.root / "out" / "results" / name
        md = (out / "results.md").read_text()
        self.assertTrue(md.startswith(f"# {name}: the chapters over `simnic` (SIMULATED)"), md)
        self.assertIn("**Simulated**", md)
        with open(out / "results.csv", newline="") as f:
            kinds = {r["kind"] for r in csv.DictReader(f)}
        self.assertEqual(kinds, {"simulated"})
        meta = json.loads((out / "results.json").read_text())["meta"]
        self.assertTrue(meta["simulated"])
        self.assertEqual(meta["kind"], "simulated")
        self.assertIn("SIMULATED (simnic)", result.stdout)
        self.assertEqual(self.status(), "")

    def test_a_simulated_folder_must_be_named_so(self):
        result = self.measure("--provider", "simnic", "--out", "out/results/plain-name")
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertIn("must say so", result.stderr.strip().splitlines()[-1])
        self.assertEqual(self.measure("--provider", "simnic", "--gpus", "2").returncode, 0)
        result = self.compare("--record-from", f"out/results/{MACHINE}-simnic-host-2x4-page256",
                              "--out",
                              "results/plain-name")
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertIn("contain 'simnic'", result.stderr.strip().splitlines()[-1])
        self.assertEqual(self.status(), "")


class TasksetPrefixTest(unittest.TestCase):
    """A recording made on part of a machine says so in its command."""

    def setUp(self):
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
        import compare
        self.compare = compare

    def test_cpu_lists_read_as_taskset_writes_them(self):
        self.assertEqual(self.compare.cpu_ranges([0, 1, 2, 3]), "0-3")
        self.assertEqual(self.compare.cpu_ranges([0, 1, 2, 5, 7, 8]), "0-2,5,7-8")

    def test_prefix_names_the_cpus_this_process_may_use(self):
        mine = sorted(os.sched_getaffinity(0))
        prefix = self.compare.taskset_prefix()
        if len(mine) < (os.cpu_count() or len(mine)):
            self.assertEqual(prefix, f"taskset -c {self.compare.cpu_ranges(mine)} ")
        else:
            self.assertEqual(prefix, "")


if __name__ == "__main__":
    unittest.main()
