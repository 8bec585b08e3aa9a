"""tools/p5_check: passes here on the p5's saved topology, and every check
fails with its own message when its piece is missing.

No machine here has EFA or a GPU, so some failures are made with stand-ins,
each saying why: a fake fi_info prints what a p5's would (check 2), a file
with the string libfabric's CUDA code carries stands in for a CUDA-enabled
libfabric (check 3), a fake p5_probe answers as efa does on a host without
peer to peer (check 4), and fake chapter binaries fail a WRITE as efa does
when two hosts' installers differ (check 7). Everything else is real: the
p5 fixture through common/topology, this machine's libfabric, p5_probe over
tcp, chapter 15 over shm and tcp, the memlock limit of a child process.
"""
import glob
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import unittest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "")) / os.environ.get("TEST_WORKSPACE", "")
HERE = pathlib.Path(__file__).resolve().parent
BASE = RUNFILES if (RUNFILES / "tools" / "p5_check.py").exists() else HERE.parent
CHECK = BASE / "tools" / "p5_check.py"
CHECKOUT = CHECK.resolve().parent.parent
FIXTURES = CHECKOUT / "tests" / "fixtures"
BIN = BASE if (BASE / "tools" / "p5_probe").exists() else CHECKOUT / "bazel-bin"
CI_PREFIX = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"),
                         "tutorial-libfabric", "libfabric-2.1.0")
P5_DOMAINS = ["rdmap%ds0-rdm" % bus for bus in range(79, 111)]  # 32 names


def fi_info_script(hmem_domains, plain_domains):
    """A fake fi_info: the p5's listing, with `hmem_domains` answering -c FI_HMEM."""
    def listing(names):
        return "".join("provider: efa\\n    fabric: efa\\n    domain: %s\\n" % n for n in names)
    return ("#!/bin/sh\ncase \"$*\" in\n  *--version*) echo 'libfabric: 2.1.0amzn3.0' ;;\n"
            "  *FI_HMEM*) printf '%s' ;;\n  *) printf '%s' ;;\nesac\n"
            % (listing(hmem_domains), listing(plain_domains)))


def executable(path, text):
    path.write_text(text)
    path.chmod(0o755)
    return path


class P5CheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp_dir = tempfile.TemporaryDirectory()
        cls.tmp = pathlib.Path(cls.tmp_dir.name)
        cls.prefix = cls.libfabric_prefix()
        cls.no_root = cls.tmp / "empty-root"  # no EFA device, no GPU
        cls.no_root.mkdir()

    @classmethod
    def tearDownClass(cls):
        cls.tmp_dir.cleanup()

    @classmethod
    def libfabric_prefix(cls):
        """CI's libfabric 2.1 (built with efa) when there, else this machine's."""
        given = os.environ.get("TUTORIAL_EFA_STANDIN")
        if given:
            return pathlib.Path(given)
        if (CI_PREFIX / "bin" / "fi_info").exists():
            return CI_PREFIX
        prefix = cls.tmp / "system-libfabric"
        (prefix / "bin").mkdir(parents=True)
        (prefix / "lib").mkdir()
        os.symlink(shutil.which("fi_info"), prefix / "bin" / "fi_info")
        for lib in glob.glob("/usr/lib/*-linux-gnu/libfabric.so.1*"):
            os.symlink(lib, prefix / "lib" / os.path.basename(lib))
        return prefix

    def check(self, *args, memlock=None, env=None):
        """Runs p5_check; returns (exit code, output)."""
        def limits():
            if memlock is not None:
                resource.setrlimit(resource.RLIMIT_MEMLOCK, (memlock, memlock))
        run = subprocess.run(
            [sys.executable, str(CHECK), "--sys-root", str(self.no_root), "--efa-prefix",
             str(self.prefix), "--probe", str(BIN / "tools" / "p5_probe"), "--topology-dump",
             str(BIN / "tools" / "topology_dump"), "--bin-dir",
             str(BIN / "chapters" / "15_lazy"), *args],
            capture_output=True, text=True, timeout=240, preexec_fn=limits,
            env=dict(os.environ, **(env or {})))
        return run.returncode, run.stdout + run.stderr

    def line(self, out, number):
        lines = out.splitlines()
        for i, text in enumerate(lines):
            if text.startswith("%d. " % number):
                following = lines[i + 1] if i + 1 < len(lines) else ""
                fix = following if following.startswith("   fix:") else ""
                return text + "\n" + fix
        self.fail("no line %d in:\n%s" % (number, out))

    def test_passes_here_on_the_p5_fixture_and_this_libfabric(self):
        unlimited = resource.RLIM_INFINITY
        # Raising the limit needs CAP_SYS_RESOURCE; without it check 6 fails, rightly.
        can_raise = subprocess.run(
            [sys.executable, "-c", "import resource as r; "
             "r.setrlimit(r.RLIMIT_MEMLOCK, (r.RLIM_INFINITY, r.RLIM_INFINITY))"],
            capture_output=True).returncode == 0
        code, out = self.check("--topology", str(FIXTURES / "p5.48xlarge.xml"), "--lspci",
                               str(FIXTURES / "p5-lspci.txt"), "--loopback-provider", "shm",
                               "--loopback-memory", "host",
                               memlock=unlimited if can_raise else None)
        self.assertIn("1. EFA installer", out)
        self.assertIn("SKIP  not the EFA installer's libfabric", self.line(out, 1))
        for number in (2, 4):
            self.assertIn("SKIP  no EFA device on this machine", self.line(out, number))
        self.assertIn("SKIP  no NVIDIA GPU here", self.line(out, 3))
        self.assertIn("PASS  8 groups of 4 NICs from hwloc", self.line(out, 5))
        self.assertIn("PASS  one 64 KiB page written host memory to host memory over shm and "
                      "verified", self.line(out, 7))
        if can_raise:
            self.assertIn("PASS  memlock limit unlimited", self.line(out, 6))
            self.assertEqual(code, 0, out)
            self.assertIn("3 PASS, 0 FAIL, 4 SKIP", out)

    def test_1_no_installer_on_a_p5(self):
        empty = self.tmp / "no-efa-prefix"
        empty.mkdir(exist_ok=True)
        code, out = self.check("--only", "1", "--instance-type", "p5.48xlarge",
                               "--efa-prefix", str(empty))
        self.assertEqual(code, 1)
        self.assertIn("FAIL  no EFA installer in %s" % empty, self.line(out, 1))
        self.assertIn("fix: install it: curl -O https://efa-installer", self.line(out, 1))
        # A libfabric without the installer's version file, on a p5.
        code, out = self.check("--only", "1", "--instance-type", "p5.48xlarge")
        self.assertIn("FAIL  EFA installer version unknown", self.line(out, 1))

    def test_1_the_installers_version_is_named(self):
        # A prefix laid out as the installer's, with its version file beside it.
        root = self.tmp / "installer"
        prefix = root / "efa"
        shutil.copytree(self.prefix, prefix, symlinks=True)
        (root / "efa_installed_packages").write_text("# EFA installer version: 1.38.1\n")
        code, out = self.check("--only", "1", "--efa-prefix", str(prefix))
        self.assertIn("PASS  EFA installer 1.38.1, libfabric", self.line(out, 1))

    def efa_prefix_with(self, name, hmem, plain):
        prefix = self.tmp / name
        (prefix / "bin").mkdir(parents=True, exist_ok=True)
        executable(prefix / "bin" / "fi_info", fi_info_script(hmem, plain))
        return prefix

    def test_2_efa_domains_with_fi_hmem(self):
        cases = [
            (P5_DOMAINS, P5_DOMAINS, "PASS  32 efa domains with FI_HMEM"),
            (P5_DOMAINS[:16], P5_DOMAINS, "FAIL  efa domains with FI_HMEM: 16, below the 32"),
            ([], P5_DOMAINS, "FAIL  efa domains with FI_HMEM: none of the 32"),
            ([], [], "FAIL  efa lists no domain"),
        ]
        for i, (hmem, plain, expected) in enumerate(cases):
            with self.subTest(expected=expected):
                prefix = self.efa_prefix_with("fake-fi-info-%d" % i, hmem, plain)
                code, out = self.check("--only", "2", "--instance-type", "p5.48xlarge",
                                       "--efa-prefix", str(prefix))
                self.assertIn(expected, self.line(out, 2))
                self.assertEqual(code, 0 if expected.startswith("PASS") else 1)
                if "below" in expected:
                    self.assertIn("network cards 0-31", self.line(out, 2))
                if "none of" in expected:
                    self.assertIn("check 3 (libcudart.so)", self.line(out, 2))

    def gpu_root(self):
        root = self.tmp / "gpu-root"
        (root / "proc/driver/nvidia/gpus/0000:53:00.0").mkdir(parents=True, exist_ok=True)
        return root

    def test_3_libcudart_missing_or_libfabric_without_cuda(self):
        # A libfabric built with CUDA carries the name it dlopens.
        prefix = self.tmp / "cuda-libfabric"
        (prefix / "lib").mkdir(parents=True, exist_ok=True)
        (prefix / "lib" / "libfabric.so.1").write_bytes(b"\0libcudart.so\0")
        code, out = self.check("--only", "3", "--sys-root", str(self.gpu_root()), "--efa-prefix",
                               str(prefix), "--cudart-name", "libcudart-not-here.so")
        self.assertEqual(code, 1)
        self.assertIn("FAIL  libfabric cannot load libcudart.so", self.line(out, 3))
        self.assertIn("fix:", self.line(out, 3))
        # A libfabric built without CUDA (Debian's 1.17 is one) says so instead.
        code, out = self.check("--only", "3", "--sys-root", str(self.gpu_root()))
        library = sorted(glob.glob(str(self.prefix / "lib*" / "libfabric.so.1*")))[0]
        if b"libcudart.so" not in pathlib.Path(library).read_bytes():
            self.assertIn("FAIL  this libfabric was built without CUDA support", self.line(out, 3))

    def test_4_gpudirect_refused(self):
        probe = executable(self.tmp / "fake-probe", "#!/bin/sh\necho 'refused on rdmap79s0-rdm: "
                           "fi_setopt(FI_OPT_FI_HMEM_P2P, FI_HMEM_P2P_REQUIRED) = -95 "
                           "(Operation not supported)'\nexit 1\n")
        code, out = self.check("--only", "4", "--instance-type", "p5.48xlarge", "--probe",
                               str(probe))
        self.assertEqual(code, 1)
        self.assertIn("FAIL  GPUDirect RDMA is off: efa refused FI_HMEM_P2P_REQUIRED",
                      self.line(out, 4))
        self.assertIn("nvidia-peermem", self.line(out, 4))
        # The real probe over tcp, which has no FI_HMEM: nothing to ask.
        code, out = self.check("--only", "4", "--probe-provider", "tcp")
        self.assertIn("FAIL  GPUDirect: no efa endpoint with FI_HMEM to ask (no endpoint to ask: "
                      "provider tcp offers no RDM endpoint with FI_HMEM", self.line(out, 4))

    def test_5_grouping_with_a_nic_missing(self):
        lspci = (FIXTURES / "p5-lspci.txt").read_text().splitlines()
        efa = [i for i, l in enumerate(lspci) if "Elastic Fabric Adapter" in l]
        for i in efa[-4:]:  # the four NICs of one switch gone
            lspci[i] = lspci[i].replace("Elastic Fabric Adapter", "Something Else")
        trimmed = self.tmp / "lspci-28.txt"
        trimmed.write_text("\n".join(lspci) + "\n")
        code, out = self.check("--only", "5", "--topology", str(FIXTURES / "p5.48xlarge.xml"),
                               "--lspci", str(trimmed))
        self.assertEqual(code, 1, out)
        self.assertIn("FAIL  GPU<->NIC grouping is not 8 groups of 4", self.line(out, 5))

    def test_6_memlock_below_unlimited(self):
        code, out = self.check("--only", "6", memlock=8 * 1024 * 1024)
        self.assertEqual(code, 1)
        self.assertIn("FAIL  memlock limit is 8192 KiB, not unlimited", self.line(out, 6))
        self.assertIn("docker run --ulimit memlock=-1:-1", self.line(out, 6))

    def test_7_loopback_write_fails(self):
        # Real chapters: CUDA memory over tcp, which this build cannot give.
        code, out = self.check("--only", "7", "--loopback-provider", "tcp", "--loopback-memory",
                               "cuda")
        self.assertEqual(code, 1, out)
        self.assertIn("FAIL  loopback WRITE: the server stopped before it listened:",
                      self.line(out, 7))
        self.assertIn("cuda", self.line(out, 7).lower())
        # efa refusing a WRITE with immediate data (installers differ).
        bins = self.tmp / "fake-chapter"
        bins.mkdir(exist_ok=True)
        executable(bins / "server", "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --address-file ]"
                   " && echo 0a0b >\"$2\"; shift; done\nsleep 30\n")
        executable(bins / "client", "#!/bin/sh\necho 'client: error: rdmap79s0-rdm: fi_writemsg: "
                   "Operation not supported'\nexit 1\n")
        code, out = self.check("--only", "7", "--loopback-provider", "shm", "--loopback-memory",
                               "host", "--bin-dir", str(bins))
        self.assertEqual(code, 1)
        self.assertIn("FAIL  loopback WRITE failed: client: error:", self.line(out, 7))
        self.assertIn("same EFA installer version on both hosts, or set "
                      "FI_EFA_USE_UNSOLICITED_WRITE_RECV=0 on both", self.line(out, 7))

    def test_the_p5_page_quotes_the_series_numbers_from_series_py(self):
        sys.path.insert(0, str(CHECKOUT / "tools"))
        import series  # noqa: E402
        page = (CHECKOUT / "docs" / "running-on-p5.md").read_text()
        for chapter, (_, gbps, mops) in series.CHAPTERS.items():
            number, name = chapter.split("_", 1)
            share = "%.1f%%" % (100 * gbps / series.SERIES_LINK_GBPS)
            row = "| %s %s | %.3f | %s | %.3f |" % (number, name, gbps, share, mops)
            self.assertIn(row, page)


if __name__ == "__main__":
    unittest.main()
