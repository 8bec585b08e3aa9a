"""tools/setup.sh on the p5's AMIs, tried here.

The package managers are stand-ins (apt-get, apt-cache, dpkg-query, dnf,
rpm, curl on PATH that only record what they were asked: the test must not
install anything), the distribution is a fake os-release, and a libfabric
prefix laid out like the EFA installer's stands in for /opt/amazon/efa:
TUTORIAL_EFA_STANDIN when set (CI's libfabric 2.x pass sets it to the build
of tools/build_libfabric.sh), else this machine's libfabric gathered into
such a layout with links. Then the main command runs for real against that
prefix: tools/compare.py over shm with the chapters Bazel built, loading the
stand-in's libfabric, and its record must name that file.
"""
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "")) / os.environ.get("TEST_WORKSPACE", "")
HERE = pathlib.Path(__file__).resolve().parent
ROOT = (RUNFILES if (RUNFILES / "tools" / "setup.sh").exists() else HERE.parent)
SETUP = ROOT / "tools" / "setup.sh"

OS_RELEASES = {
    "debian12": 'ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
    "ubuntu2204": 'ID=ubuntu\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.5 LTS"\n',
    "ubuntu2404": 'ID=ubuntu\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\n',
    "al2023": 'ID="amzn"\nVERSION_ID="2023"\nPRETTY_NAME="Amazon Linux 2023.6.20241212"\n',
    "fedora": 'ID=fedora\nVERSION_ID="41"\nPRETTY_NAME="Fedora Linux 41"\n',
}
# Names setup.sh must ask for, per distribution (hwloc, GoogleTest, CLI11,
# nlohmann-json, a compiler), and the libfabric it must leave out beside EFA.
WANTED = {
    "debian12": ["g++", "libhwloc-dev", "libgtest-dev", "libcli11-dev", "nlohmann-json3-dev"],
    "ubuntu2204": ["g++", "libhwloc-dev", "libgtest-dev", "libcli11-dev", "nlohmann-json3-dev"],
    "ubuntu2404": ["g++", "libhwloc-dev", "libgtest-dev", "libcli11-dev", "nlohmann-json3-dev"],
    "al2023": ["gcc-c++", "hwloc-devel", "gtest-devel", "cli11-devel", "json-devel"],
}
LIBFABRIC = {"debian12": "libfabric-dev", "ubuntu2204": "libfabric-dev",
             "ubuntu2404": "libfabric-dev", "al2023": "libfabric-devel"}

# Tools setup.sh uses besides the stand-ins; linked into a PATH of their own
# so that this machine's bazel, apt and dnf are out of reach.
TOOLS = ["bash", "sh", "sed", "grep", "mktemp", "rm", "install", "tee", "chmod", "uname", "id",
         "cat", "printf", "env", "dirname", "basename"]

STANDIN = """#!/bin/sh
echo "$(basename "$0") $*" >>"$FAKE_LOG"
case "$(basename "$0")" in
  sudo) exec "$@" ;;
  dpkg-query|rpm) exit 1 ;;                          # nothing is installed
  apt-cache) [ -n "$FAKE_APT_HAS_BAZEL" ] || exit 100 ;;
  curl) while [ $# -gt 0 ]; do [ "$1" = -o ] && echo fake-bazelisk >"$2"; shift; done ;;
  bazel) echo "bazel 0 (stand-in)" ;;
esac
exit 0
"""


def standin_prefix(tmp):
    """A prefix laid out like /opt/amazon/efa: bin/fi_info, lib/, include/."""
    given = os.environ.get("TUTORIAL_EFA_STANDIN")
    if given:
        return pathlib.Path(given)
    prefix = tmp / "efa"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "include").mkdir()
    os.symlink("/usr/include/rdma", prefix / "include" / "rdma")
    os.symlink(shutil.which("fi_info"), prefix / "bin" / "fi_info")
    libs = glob.glob("/usr/lib/*-linux-gnu/libfabric.so.1*") + glob.glob("/usr/lib64/libfabric.so.1*")
    for lib in libs:
        os.symlink(lib, prefix / "lib" / os.path.basename(lib))
    return prefix


class SetupTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp_dir = tempfile.TemporaryDirectory()
        cls.tmp = pathlib.Path(cls.tmp_dir.name)
        cls.efa = standin_prefix(cls.tmp)

    @classmethod
    def tearDownClass(cls):
        cls.tmp_dir.cleanup()

    def setup(self, distro, efa_prefix, with_bazel=False, apt_has_bazel=False):
        """Runs setup.sh; returns (result, the stand-ins' log lines, bin dir)."""
        case = pathlib.Path(tempfile.mkdtemp(dir=self.tmp))
        fake, tools, bin_dir = case / "fake", case / "tools", case / "usr-local-bin"
        for d in (fake, tools, bin_dir):
            d.mkdir()
        names = ["apt-get", "apt-cache", "dpkg-query", "dnf", "rpm", "curl", "sudo"]
        if with_bazel:
            names.append("bazel")
        for name in names:
            (fake / name).write_text(STANDIN)
            (fake / name).chmod(0o755)
        for tool in TOOLS:
            if shutil.which(tool):
                os.symlink(shutil.which(tool), tools / tool)
        (case / "os-release").write_text(OS_RELEASES[distro])
        log = case / "log"
        log.touch()
        env = {"PATH": f"{fake}:{tools}", "FAKE_LOG": str(log), "EFA_PREFIX": str(efa_prefix),
               "SETUP_OS_RELEASE": str(case / "os-release"), "SETUP_BIN_DIR": str(bin_dir),
               "FAKE_APT_HAS_BAZEL": "1" if apt_has_bazel else "", "HOME": str(case)}
        result = subprocess.run([tools / "bash", str(SETUP)], env=env, capture_output=True,
                                text=True, timeout=60)
        return result, log.read_text().splitlines(), bin_dir

    def installs(self, log):
        """The package names setup.sh asked apt-get or dnf to install."""
        names = []
        for line in log:
            words = line.split()
            if words[:2] in (["apt-get", "install"], ["dnf", "install"]):
                names += [w for w in words[2:] if not w.startswith("-")]
        return names

    def test_with_the_efa_installer_its_libfabric_is_kept(self):
        for distro in WANTED:
            with self.subTest(distro=distro):
                result, log, _ = self.setup(distro, self.efa, with_bazel=True)
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
                self.assertIn(f"from the EFA installer in {self.efa}", result.stdout)
                self.assertIn(f"LIBFABRIC_PREFIX={self.efa}", result.stdout)
                names = self.installs(log)
                for wanted in WANTED[distro]:
                    self.assertIn(wanted, names)
                self.assertFalse([n for n in names if n.startswith("libfabric")], names)

    def test_without_it_the_distributions_libfabric_is_installed(self):
        for distro in WANTED:
            with self.subTest(distro=distro):
                result, log, _ = self.setup(distro, self.tmp / "no-efa", with_bazel=True)
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
                self.assertIn(LIBFABRIC[distro], self.installs(log))
                self.assertNotIn("EFA installer", result.stdout)

    def test_bazel_from_debian_else_bazelisk_at_a_named_version(self):
        result, log, bin_dir = self.setup("debian12", self.efa)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("bazel-bootstrap", self.installs(log))
        self.assertFalse([line for line in log if line.startswith("curl")])
        for distro in ("al2023", "ubuntu2404"):
            with self.subTest(distro=distro):
                result, log, bin_dir = self.setup(distro, self.efa)
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
                (curl,) = [line for line in log if line.startswith("curl")]
                self.assertIn("bazelisk/releases/download/v1.25.0/bazelisk-linux-", curl)
                self.assertIn("USE_BAZEL_VERSION:-6.5.0", (bin_dir / "bazel").read_text())
        # Where apt packages Bazel, that package, not Bazelisk.
        result, log, _ = self.setup("ubuntu2204", self.efa, apt_has_bazel=True)
        self.assertIn("bazel-bootstrap", self.installs(log))
        self.assertFalse([line for line in log if line.startswith("curl")])

    def test_an_unknown_distribution_is_one_line_and_exit_1(self):
        result, log, _ = self.setup("fedora", self.efa, with_bazel=True)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertIn("Fedora Linux 41 is not one this script knows", result.stderr)
        self.assertEqual(self.installs(log), [])

    def test_the_main_command_runs_on_the_standin_libfabric(self):
        # bash tools/setup.sh && python3 tools/compare.py, the second with the
        # chapters Bazel built (no Bazel inside a test), loading the stand-in's
        # libfabric as a p5 loads /opt/amazon/efa's.
        out = self.tmp / "compare-out"
        libdir = next(d for d in ("lib64", "lib") if glob.glob(str(self.efa / d / "libfabric.so*")))
        env = dict(os.environ, LD_LIBRARY_PATH=str(self.efa / libdir))
        result = subprocess.run(
            [sys.executable, str(ROOT / "tools" / "compare.py"), "--bin-dir",
             str(ROOT / "chapters"), "--chapters", "10_warmup", "--runs", "1", "--provider",
             "shm", "--pages", "16", "--repeat", "2", "--machine", "setup-test", "--out",
             str(out)], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout[-2000:] + result.stderr[-2000:])
        meta = json.loads((out / "results.json").read_text())["meta"]
        self.assertTrue(meta["libfabric_path"].startswith(str(self.efa / libdir)), meta)
        fi_info = subprocess.run([str(self.efa / "bin" / "fi_info"), "--version"],
                                 capture_output=True, text=True, env=env).stdout
        self.assertIn(f"libfabric: {meta['libfabric_build']}", fi_info)

    def test_a_chapters_first_line_names_the_standin_libfabric(self):
        libdir = next(d for d in ("lib64", "lib") if glob.glob(str(self.efa / d / "libfabric.so*")))
        env = dict(os.environ, LD_LIBRARY_PATH=str(self.efa / libdir))
        address = self.tmp / "address"
        chapter = ROOT / "chapters" / "10_warmup"
        server = subprocess.Popen(
            [str(chapter / "server"), "--provider", "shm", "--memory", "host", "--once",
             "--repeat", "1", "--address-file", str(address)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            for _ in range(300):  # 30 s at most
                if address.exists() and address.read_text().strip():
                    break
                if server.poll() is not None:
                    break
                time.sleep(0.1)
            client = subprocess.run(
                [str(chapter / "client"), "--server", address.read_text().strip(), "--provider",
                 "shm", "--memory", "host", "--gpus", "1", "--nics-per-gpu", "2", "--pages", "8"],
                env=env, capture_output=True, text=True, timeout=60)
            out, _ = server.communicate(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        self.assertEqual(client.returncode, 0, client.stdout + client.stderr)
        first = out.splitlines()[0]
        self.assertRegex(first, r"^libfabric \d+\.\d+\.\d+\S* \(API \d+\.\d+\) from ")
        self.assertIn(f" from {self.efa / libdir}/libfabric.so", first)


if __name__ == "__main__":
    unittest.main()
