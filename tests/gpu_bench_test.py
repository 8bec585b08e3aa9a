"""maint/gpu_bench.py and maint/gpu_tables.py end to end, on a machine without a GPU.

The GPU bench runs only on lent GPU machines, where a broken tool costs device
time; this runs its host-memory phases here, so that a regression shows up in
CI instead: the ceiling, the provider alone (mt-host), the last chapter split
over processes, and every chapter given. Two chapters run for real (server and client, shm over real
libfabric, every byte verified). fi_rma_bw is a stand-in (tests/fake_fabtests,
which says why): the test checks how the bench starts the pairs, parses their
rows and sums them, that it calibrates each pair's WRITEs by time from a short
run, that a pair that exits with an error or hangs is recorded with its
reason and last output, and that gpu_tables turns the records into tables
that its own --check accepts. Each bench gets free out-of-band ports
(--oob-port): other checkouts may run this test on the same machine.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import unittest

RUNFILES = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
CHAPTERS = ["10_warmup", "15_lazy"]
PAGE = 65536
ITERS = 1000  # per fake fi_rma_bw pair, which reports them moved in 0.5 s
USEC = 500  # the fake's time per WRITE (FAKE_FABTESTS_USEC's default)


def free_port_base(count=4):
    """A base port with `count` free ports after it: other checkouts' tests may
    run fabtests stand-ins on the same machine at the same time."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count >= 65536:
            continue
        try:
            held = []
            for k in range(count):
                t = socket.socket()
                held.append(t)
                t.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for t in held:
                t.close()
    raise RuntimeError("no free ports")


def run(args, timeout):
    return subprocess.run([sys.executable] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=timeout)


class GpuBenchHostPhasesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        cls.out = pathlib.Path(cls.tmp.name) / "bench"
        cls.bench = run([RUNFILES / "maint" / "gpu_bench.py",
                         "--bin-dir", RUNFILES / "chapters",
                         "--fabtests", RUNFILES / "tests" / "fake_fabtests",
                         "--out", cls.out, "--phases", "env,ceiling,mt-host,split,host",
                         "--sizes", PAGE, "--host-sizes", PAGE, "--host-gpus", 1,
                         "--host-nics", 2, "--nics-per-gpu", 2, "--split-memory", "host",
                         "--runs", 1, "--ops-per-run", 2000, "--iters-mt-host", ITERS,
                         "--buffer-bytes", 4 << 20,
                         # The ceiling's WRITEs come from the short run (100 at
                         # 500 us each): 0.5 s makes ITERS; --iters-small would
                         # be used only without calibration.
                         "--calibrate-iters", 100, "--ceiling-seconds", ITERS * USEC / 1e6,
                         "--iters-small", 7,
                         "--chapters", ",".join(CHAPTERS), "--run-timeout", 60,
                         "--ceiling-timeout", 60, "--budget", 200,
                         "--oob-port", free_port_base()], timeout=300)
        records = cls.out / "records.jsonl"
        cls.records = ([json.loads(line) for line in records.read_text().splitlines()]
                       if records.exists() else [])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def phase(self, name):
        return [r for r in self.records if r["phase"] == name]

    def test_bench_exits_cleanly(self):
        self.assertEqual(self.bench.returncode, 0, self.bench.stdout[-2000:] + self.bench.stderr)

    def test_env_is_recorded(self):
        (env,) = self.phase("env")
        self.assertEqual(env["gpus"], [])  # no GPU here: an empty list, not a crash
        self.assertIn("fake", env["libfabric"])

    def test_ceiling_pairs_are_summed(self):
        host = [r for r in self.phase("ceiling") if r["memory"] == "host"]
        self.assertEqual(len(host), 1)
        (ceiling,) = host
        self.assertTrue(ceiling["ok"], ceiling["errors"])
        self.assertEqual(ceiling["pairs"], 2)  # one pair per endpoint: 1 group x 2
        one_pair_gbps = PAGE * ITERS / 0.5 * 8 / 1e9
        self.assertAlmostEqual(ceiling["gbps"], 2 * one_pair_gbps, delta=0.01)
        self.assertEqual(ceiling["pair_seconds"], [0.5, 0.5])

    def test_ceiling_iterations_are_calibrated_by_time(self):
        for ceiling in self.phase("ceiling"):
            self.assertEqual(ceiling["calibration"]["iters"], 100)
            self.assertEqual(ceiling["calibration"]["usec_per_write"], [USEC, USEC])
            self.assertEqual(ceiling["iters"], [ITERS, ITERS])
            self.assertEqual(ceiling["failures"], [])

    def test_provider_alone_in_one_process_and_in_many(self):
        mt = self.phase("mt")
        self.assertEqual([(r["processes"], r["endpoints_per_process"]) for r in mt],
                         [(1, 2), (2, 1)])
        for record in mt:
            self.assertTrue(record["ok"], record["errors"])

    def test_last_chapter_split_over_processes(self):
        split = self.phase("split")
        self.assertEqual([(r["processes_per_side"], r["nics_per_process"]) for r in split],
                         [(1, 2), (2, 1)])
        for record in split:
            self.assertTrue(record["ok"], record["errors"])
            self.assertEqual(record["chapter"], CHAPTERS[-1])
            self.assertEqual(len(record["pair_gbps"]), record["processes_per_side"])

    def test_every_chapter_ran_and_verified(self):
        runs = {r["chapter"]: r for r in self.phase("host")}
        self.assertEqual(sorted(runs), CHAPTERS)
        for chapter, record in runs.items():
            self.assertTrue(record["ok"], record)
            # The libfabric the chapter ran on: full version, and the file loaded.
            self.assertRegex(record["libfabric_version"], r"^\d+\.\d+\.\d+", chapter)
            self.assertIn("libfabric.so", record["libfabric_path"], chapter)
            self.assertTrue(os.path.exists(record["libfabric_path"]), record["libfabric_path"])
            self.assertGreater(record["gbps"], 0, chapter)
            self.assertEqual((record["gpus"], record["nics_per_gpu"]), (1, 2))

    def test_tables_are_made_and_pass_their_check(self):
        folder = pathlib.Path(self.tmp.name) / "tables"
        tool = RUNFILES / "maint" / "gpu_tables.py"
        made = run([tool, self.out / "records.jsonl", folder, "--title", "host phases",
                    "--command", "gpu_bench_test"], timeout=120)
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        text = (folder / "results.md").read_text()
        self.assertIn("| GPUs | none found |", text)
        self.assertIn("## host memory, 64 KiB pages, 1 group(s) x 2 endpoints", text)
        for chapter in CHAPTERS:
            self.assertIn(f"| {chapter} |", text)
        self.assertIn(f"Chapter {CHAPTERS[-1]}, host memory:", text)  # the split section
        self.assertIn("| host | 64 KiB | 2 | 1 |", text)  # the provider alone, per endpoint
        self.assertNotIn("## Failed runs", text)
        checked = run([tool, "--check", folder], timeout=120)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)


class GpuTablesOneGpuTest(unittest.TestCase):
    """On one GPU, fi_rma_bw's pairs of CUDA memory all share that GPU, so
    their sum bounds nothing (results/h100-shm-cuda/README.md): the tables
    say so beside the measurement and show no share of it, while host
    memory's ceiling keeps its share."""

    def test_no_share_of_a_ceiling_known_to_be_none(self):
        tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(tmp.cleanup)
        folder = pathlib.Path(tmp.name)
        ceiling = {"phase": "ceiling", "tool": "fi_rma_bw -o writedata -W 64", "provider": "shm",
                   "page_size": PAGE, "pairs": 4, "ok": True, "gbps": 4.0, "mops": 0.007,
                   "iters": [9000] * 4, "pair_seconds": [5.0] * 4, "gbps_lower_bound": 4.0}
        run_record = {"chapter": CHAPTERS[0], "provider": "shm", "page_size": PAGE, "gpus": 1,
                      "nics_per_gpu": 4, "poll_threads": "gpu", "runs": 1, "ok": True,
                      "gbps": 80.0, "mops": 0.15, "all_gbps": [80.0], "pages": 100,
                      "repeat": 1, "command": "server --once --repeat 1 --address-file x"}
        records = [{"phase": "env", "gpus": ["0, NVIDIA H100 80GB HBM3, 580, 0:6.0, 81559 MiB"]},
                   dict(ceiling, memory="cuda"), dict(ceiling, memory="host", gbps=100.0),
                   dict(run_record, phase="cuda", memory="cuda"),
                   dict(run_record, phase="host", memory="host")]
        (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        made = run([RUNFILES / "maint" / "gpu_tables.py", folder / "records.jsonl",
                    folder / "tables", "--command", "gpu_bench_test"], timeout=120)
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        text = (folder / "tables" / "results.md").read_text()
        cuda, host = text.split("## host memory")
        self.assertIn("**Not a ceiling**", cuda)
        self.assertIn(f"| {CHAPTERS[0]} | 80.0 | 0.150 | none: not a ceiling |", cuda)
        self.assertNotIn("2000.0%", cuda)
        self.assertIn(f"| {CHAPTERS[0]} | 80.0 | 0.150 | 80.0% |", host)
        self.assertNotIn("Not a ceiling", host)

    def test_one_pair_alone_is_shown_beside_not_taken_as_the_ceiling(self):
        """One fi_rma_bw pair alone, measured in the same run as the pairs at
        once: shown beside them with each chapter's multiple of it; the
        reference stays the pairs at once; an emulated-WRITE run gets a table
        of its own (never a GPU number)."""
        tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(tmp.cleanup)
        folder = pathlib.Path(tmp.name)
        ceiling = {"phase": "ceiling", "tool": "fi_rma_bw -o writedata -W 64", "provider": "shm",
                   "memory": "cuda", "page_size": PAGE, "ok": True, "mops": 0.007,
                   "gbps_lower_bound": 4.0}
        run_record = {"phase": "cuda", "memory": "cuda", "provider": "shm", "page_size": PAGE,
                      "gpus": 1, "nics_per_gpu": 4, "poll_threads": "gpu", "runs": 1, "ok": True,
                      "mops": 0.15, "pages": 100, "repeat": 1,
                      "command": "server --once --repeat 1 --address-file x"}
        records = [{"phase": "env", "gpus": ["0, NVIDIA H200, 580, 0:6.0, 143771 MiB"],
                    "libfabric_providers": ["shm", "tcp"]},
                   dict(ceiling, pairs=1, gbps=40.0, iters=[90000], pair_seconds=[5.0],
                        calibration={"usec_per_write": [16.9]}),
                   dict(ceiling, pairs=4, gbps=4.0, iters=[9000] * 4, pair_seconds=[5.0] * 4),
                   dict(run_record, chapter=CHAPTERS[0], gbps=120.0, all_gbps=[120.0],
                        memory_label="cuda"),
                   dict(run_record, chapter=CHAPTERS[1], gbps=60.0, all_gbps=[60.0],
                        memory_label="cuda-emulated")]
        (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        made = run([RUNFILES / "maint" / "gpu_tables.py", folder / "records.jsonl",
                    folder / "tables", "--command", "gpu_bench_test"], timeout=120)
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        text = (folder / "tables" / "results.md").read_text()
        self.assertIn("(providers on this machine: shm, tcp)", text)
        cuda, emulated = text.split("## cuda-emulated memory")
        self.assertIn("fi_rma_bw, 4 pairs: **4.0 Gbps**", cuda)
        self.assertIn("fi_rma_bw, 1 pair alone: **40.0 Gbps**", cuda)
        self.assertIn(f"| {CHAPTERS[0]} | 120.0 | 0.150 | none: not a ceiling | 3.00 |", cuda)
        self.assertNotIn(CHAPTERS[1], cuda)
        self.assertIn(f"| {CHAPTERS[1]} | 60.0 |", emulated)
        header = (folder / "tables" / "results.csv").read_text().splitlines()[0]
        self.assertTrue(header.endswith(",one_pair_gbps"), header)


class GpuBenchFailingPairTest(unittest.TestCase):
    """A pair that fails is recorded with its reason and last output, not as
    an empty string; the tables say why the ceiling is missing."""

    def bench(self, pair, how, *flags):
        tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(tmp.cleanup)
        out = pathlib.Path(tmp.name) / "bench"
        port = free_port_base()
        env = dict(os.environ, FAKE_FABTESTS_FAIL=f"{port + pair}:{how}")
        flags += ("--oob-port", port)
        result = subprocess.run(
            [sys.executable, str(RUNFILES / "maint" / "gpu_bench.py"),
             "--bin-dir", str(RUNFILES / "chapters"),
             "--fabtests", str(RUNFILES / "tests" / "fake_fabtests"), "--out", str(out),
             "--phases", "ceiling", "--sizes", str(PAGE), "--nics-per-gpu", "2",
             "--calibrate-iters", "100", "--chapters", ",".join(CHAPTERS), *map(str, flags)],
            capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(result.returncode, 0, result.stdout[-2000:] + result.stderr)
        records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
        (ceiling,) = [r for r in records if r["phase"] == "ceiling"]
        tables = pathlib.Path(tmp.name) / "tables"
        made = run([RUNFILES / "maint" / "gpu_tables.py", out / "records.jsonl", tables,
                    "--command", "gpu_bench_test"], timeout=120)
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        return ceiling, (tables / "results.md").read_text()

    def test_a_pair_that_exits_with_an_error(self):
        ceiling, tables = self.bench(1, "exit")
        self.assertFalse(ceiling["ok"])
        self.assertEqual(ceiling["failed_in"], "calibration")
        self.assertEqual(len(ceiling["failures"]), 1, ceiling["failures"])
        (failure,) = ceiling["failures"]
        self.assertEqual((failure["pair"], failure["role"]), (1, "client"))
        self.assertEqual((failure["reason"], failure["exit_code"]), ("exit code 3", 3))
        self.assertEqual(failure["last_lines"][-1], "fi_cq_read(): fake failure, -FI_EIO")
        self.assertEqual(ceiling["errors"], [
            "pair 1 client: exit code 3; last output: fake fi_rma_bw: posting 100 writes | "
            "fi_cq_read(): fake failure, -FI_EIO"])
        self.assertIn("no complete measurement: pair 1 client in the calibration run: exit "
                      "code 3 (last output: fi_cq_read(): fake failure, -FI_EIO)", tables)

    def test_a_pair_that_hangs_is_stopped_at_the_timeout(self):
        started = time.monotonic()
        ceiling, _ = self.bench(0, "hang", "--ceiling-timeout", 3, "--ceiling-seconds", 1)
        self.assertLess(time.monotonic() - started, 60)
        self.assertFalse(ceiling["ok"])
        self.assertEqual(len(ceiling["failures"]), 1, ceiling["failures"])
        (failure,) = ceiling["failures"]
        self.assertEqual((failure["pair"], failure["role"]), (0, "client"))
        self.assertEqual(failure["reason"], "timed out after 3 s (the batch's --ceiling-timeout)")
        self.assertIsNone(failure["exit_code"])
        # Its output up to the kill is kept (fabtests' stdio is line-buffered).
        self.assertEqual(failure["last_lines"], ["fake fi_rma_bw: posting 100 writes"])


class GpuBenchBadFlagsTest(unittest.TestCase):
    """A wrong flag costs no GPU time: one error line, exit 2, nothing written."""

    def bench(self, *flags):
        out = pathlib.Path(os.environ["TEST_TMPDIR"]) / "never"
        result = run([RUNFILES / "maint" / "gpu_bench.py", "--bin-dir", RUNFILES / "chapters",
                      "--fabtests", RUNFILES / "tests" / "fake_fabtests", "--out", out,
                      "--chapters", ",".join(CHAPTERS), *flags], timeout=60)
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertFalse(out.exists())
        return result.stderr.strip().splitlines()[-1]

    def test_unknown_phase(self):
        self.assertIn("--phases: unknown ceilings", self.bench("--phases", "env,ceilings"))

    def test_unknown_poll_mode(self):
        self.assertIn("--poll-threads", self.bench("--poll-threads", "cpu"))

    def test_unknown_chapter(self):
        self.assertIn("--chapters: unknown 16_fast", self.bench("--chapters", "16_fast"))

    def test_missing_fabtests_tool(self):
        self.assertIn("--fabtests: no fi_rma_bw", self.bench("--fabtests", RUNFILES / "tools"))

    def test_missing_chapter_binaries(self):
        self.assertIn("--bin-dir: no 10_warmup/server", self.bench("--bin-dir", RUNFILES / "tools"))

    def test_sides_with_different_numbers_of_gpus(self):
        self.assertIn("as many devices on each side",
                      self.bench("--server-devices", "0,1", "--client-devices", "2"))

    def test_one_gpu_for_both_sides_is_accepted(self):
        out = pathlib.Path(os.environ["TEST_TMPDIR"]) / "one-gpu"
        result = run([RUNFILES / "maint" / "gpu_bench.py", "--bin-dir", RUNFILES / "chapters",
                      "--fabtests", RUNFILES / "tests" / "fake_fabtests", "--out", out,
                      "--chapters", ",".join(CHAPTERS), "--phases", "env",
                      "--server-devices", "0", "--client-devices", "0"], timeout=60)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_missing_copy_probe(self):
        self.assertIn("no probes/cuda_copy_probe", self.bench("--phases", "copy"))


class GpuTablesBadInputTest(unittest.TestCase):
    """Records that cannot be read: one line naming the file (and line), exit 2."""

    def tables(self, *paths):
        out = pathlib.Path(os.environ["TEST_TMPDIR"]) / "no-tables"
        result = run([RUNFILES / "maint" / "gpu_tables.py", *paths, out, "--command", "x"],
                     timeout=60)
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertFalse(out.exists())
        return result.stderr.strip().splitlines()[-1]

    def test_missing_records_file(self):
        self.assertIn("nothing.jsonl: No such file", self.tables("nothing.jsonl"))

    def test_records_file_with_a_broken_line(self):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
            f.write('{"phase": "env"}\n{"phase": \n')
            f.flush()
            self.assertIn(f"{f.name}:2: not a JSON line", self.tables(f.name))

    def test_check_of_a_missing_folder_is_a_problem_not_a_crash(self):
        result = run([RUNFILES / "maint" / "gpu_tables.py", "--check", "no-such-folder"],
                     timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("no-such-folder/results.md: No such file", result.stdout)
        self.assertEqual(result.stderr, "")


if __name__ == "__main__":
    unittest.main()
