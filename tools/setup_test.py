"""tools/setup.sh on the p5's AMIs, tried here.

The package managers are stand-ins (apt-get, apt-cache, dpkg-query, dnf,
rpm, curl on PATH that only record what they were asked: the test must not
install anything). Their index is the system's recorded package list,
tests/fixtures/packages/<system>.txt, which says where each name was
checked: apt-cache show and dnf list find a name only if that file lists
it, and an install of an unlisted name fails as apt-get's would. So the
test runs setup.sh's real selection logic against what each distribution
publishes. The distribution is a fake os-release, and a libfabric prefix
laid out like the EFA installer's stands in for /opt/amazon/efa:
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
CHECKOUT = SETUP.resolve().parent.parent  # runfiles link to the source tree
FIXTURES = CHECKOUT / "tests" / "fixtures" / "packages"

OS_RELEASES = {
    "debian12": 'ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
    "ubuntu2204": 'ID=ubuntu\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.5 LTS"\n',
    "ubuntu2404": 'ID=ubuntu\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\n',
    "al2023": 'ID="amzn"\nVERSION_ID="2023"\nPRETTY_NAME="Amazon Linux 2023.6.20241212"\n',
    "fedora": 'ID=fedora\nVERSION_ID="41"\nPRETTY_NAME="Fedora Linux 41"\n',
}
SYSTEMS = ["debian12", "ubuntu2204", "ubuntu2404", "al2023"]
# What the build cannot do without, per system: setup.sh must install it.
REQUIRED = {
    "debian12": ["g++", "make", "python3", "libhwloc-dev", "libgtest-dev"],
    "ubuntu2204": ["g++", "make", "python3", "libhwloc-dev", "libgtest-dev"],
    "ubuntu2404": ["g++", "make", "python3", "libhwloc-dev", "libgtest-dev"],
    "al2023": ["gcc-c++", "make", "python3", "hwloc-devel"],
}
# One Bazel path per system: packages, or None for Bazelisk.
BAZEL = {
    "debian12": ["bazel-bootstrap", "bazel-rules-java"],
    "ubuntu2204": ["bazel-bootstrap"],
    "ubuntu2404": ["bazel-bootstrap"],
    "al2023": None,
}
LIBFABRIC = {"debian12": "libfabric-dev", "ubuntu2204": "libfabric-dev",
             "ubuntu2404": "libfabric-dev", "al2023": "libfabric-devel"}

# Tools setup.sh uses besides the stand-ins; linked into a PATH of their own
# so that this machine's bazel, apt and dnf are out of reach.
TOOLS = ["bash", "sh", "sed", "grep", "mktemp", "rm", "install", "tee", "chmod", "uname", "id",
         "cat", "printf", "env", "dirname", "basename", "readlink", "cp", "mkdir"]

STANDIN = """#!/bin/sh
echo "$(basename "$0") $*" >>"$FAKE_LOG"
listed() { grep -qx "$1" "$FAKE_INDEX"; }
case "$(basename "$0")" in
  sudo) exec "$@" ;;
  dpkg-query|rpm) exit 1 ;;                          # nothing is installed
  apt-cache) [ "$1" = show ] && { listed "$2" || exit 100; } ;;
  dnf) if [ "$1" = list ]; then shift; [ "$1" = --quiet ] && shift; listed "$1" || exit 1; fi
       if [ "$1" = install ]; then
         for n in "$@"; do case $n in install|-*) ;; *) listed "$n" || exit 1 ;; esac; done
       fi ;;
  apt-get) if [ "$1" = install ]; then
             for n in "$@"; do case $n in install|-*) ;; *) listed "$n" || exit 100 ;; esac; done
           fi ;;
  curl) while [ $# -gt 0 ]; do [ "$1" = -o ] && echo fake-bazelisk >"$2"; shift; done ;;
  bazel) echo "bazel 0 (stand-in)" ;;
esac
exit 0
"""


def fixture_names(system):
    """The names a system's recorded package list has (its first column)."""
    names = []
    for line in (FIXTURES / f"{system}.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            names.append(line.split()[0])
    return names


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

    def setup(self, distro, efa_prefix, with_bazel=False, index=None, args=()):
        """Runs setup.sh; returns (result, the stand-ins' log lines, case dir).

        index: the package names the stand-in managers know; by default the
        system's recorded list (tests/fixtures/packages)."""
        case = pathlib.Path(tempfile.mkdtemp(dir=self.tmp))
        fake, tools = case / "fake", case / "tools"
        for d in (fake, tools, case / "bin", case / "include"):
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
        if index is None:
            index = fixture_names(distro) if distro in SYSTEMS else []
        (case / "index").write_text("".join(n + "\n" for n in index))
        log = case / "log"
        log.touch()
        env = {"PATH": f"{fake}:{tools}", "FAKE_LOG": str(log), "FAKE_INDEX": str(case / "index"),
               "EFA_PREFIX": str(efa_prefix), "SETUP_OS_RELEASE": str(case / "os-release"),
               "SETUP_BIN_DIR": str(case / "bin"), "SETUP_INCLUDE_DIR": str(case / "include"),
               "HOME": str(case)}
        result = subprocess.run([tools / "bash", str(SETUP), *args], env=env,
                                capture_output=True, text=True, timeout=60)
        return result, log.read_text().splitlines(), case

    def installs(self, log):
        """The package names setup.sh asked apt-get or dnf to install."""
        names = []
        for line in log:
            words = line.split()
            if words[:2] in (["apt-get", "install"], ["dnf", "install"]):
                names += [w for w in words[2:] if not w.startswith("-")]
        return names

    def test_every_system_has_a_recorded_package_list_with_sources(self):
        for system in SYSTEMS:
            with self.subTest(system=system):
                text = (FIXTURES / f"{system}.txt").read_text()
                self.assertTrue(text.startswith("#"), "the list opens with where it was checked")
                for line in text.splitlines():
                    if line.strip() and not line.startswith("#"):
                        self.assertEqual(len(line.split()), 3, f"NAME VERSION SOURCE: {line}")
                for name in REQUIRED[system]:
                    self.assertIn(name, fixture_names(system))

    def test_each_system_gets_its_required_packages_and_its_bazel(self):
        for system in SYSTEMS:
            with self.subTest(system=system):
                result, log, case = self.setup(system, self.efa)
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
                names = self.installs(log)
                for wanted in REQUIRED[system]:
                    self.assertIn(wanted, names)
                self.assertFalse([n for n in names if n.startswith("libfabric")], names)
                self.assertIn(f"from the EFA installer in {self.efa}", result.stdout)
                self.assertIn(f"LIBFABRIC_PREFIX={self.efa}", result.stdout)
                curls = [line for line in log if line.startswith("curl")]
                if BAZEL[system] is None:
                    self.assertEqual(len(curls), 1, log)
                    self.assertIn("bazelisk/releases/download/v1.25.0/bazelisk-linux-", curls[0])
                    self.assertIn("USE_BAZEL_VERSION:-4.2.3", (case / "bin" / "bazel").read_text())
                else:
                    self.assertEqual(curls, [])
                    for package in BAZEL[system]:
                        self.assertIn(package, names)
                    if system != "debian12":
                        self.assertNotIn("bazel-rules-java", names)  # Ubuntu has none
                if system != "al2023":
                    # apt-cache knows nothing before the first update.
                    first_update = next(i for i, l in enumerate(log) if l == "apt-get update -q")
                    first_show = next(i for i, l in enumerate(log) if l.startswith("apt-cache"))
                    self.assertLess(first_update, first_show)

    def test_a_missing_optional_package_warns_and_setup_goes_on(self):
        # The Ubuntu and AL2023 lists leave most optional names out.
        for system in SYSTEMS:
            with self.subTest(system=system):
                result, log, _ = self.setup(system, self.efa, with_bazel=True)
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
                if system != "debian12":
                    self.assertIn("warning: optional package stress-ng is not in", result.stdout)
                self.assertNotIn("stress-ng", self.installs(log) if system != "debian12" else [])
                self.assertIn("setup: done", result.stdout)
        # One that the index lists but fails to install costs only itself.
        index = fixture_names("debian12")
        result, log, _ = self.setup("debian12", self.efa, with_bazel=True,
                                    index=index + ["stress-ng-broken"])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_without_cli11_or_json_packages_the_vendored_headers_build(self):
        index = [n for n in fixture_names("ubuntu2204")
                 if n not in ("libcli11-dev", "nlohmann-json3-dev")]
        result, log, case = self.setup("ubuntu2204", self.efa, with_bazel=True, index=index)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("cli11 headers: no package", result.stdout)
        self.assertIn("nlohmann_json headers: no package", result.stdout)
        include = case / "include"
        self.assertTrue((include / "CLI" / "CLI.hpp").exists())
        self.assertTrue((include / "nlohmann" / "json.hpp").exists())
        # The two sources that use them compile against those copies (-H
        # lists every header opened; the vendored ones must be the ones).
        for source in ("common/options.cc", "common/result_json.cc"):
            with self.subTest(source=source):
                cc = subprocess.run(
                    ["g++", "-std=c++17", "-fsyntax-only", "-H", "-I", str(include), "-I",
                     str(CHECKOUT), str(CHECKOUT / source)],
                    capture_output=True, text=True, timeout=120)
                self.assertEqual(cc.returncode, 0, cc.stderr[-3000:])
                header = "CLI/CLI.hpp" if "options" in source else "nlohmann/json.hpp"
                opened = [l for l in cc.stderr.splitlines() if l.endswith(header)]
                self.assertTrue(opened and opened[0].split()[-1].startswith(str(include)), opened)
        # AL2023 has neither package in this simulation: both vendored.
        result, _, case = self.setup("al2023", self.efa, with_bazel=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("without GoogleTest the chapters build", result.stdout)
        self.assertTrue((case / "include" / "CLI" / "CLI.hpp").exists())

    def test_a_missing_required_package_stops_with_one_line_naming_it(self):
        # AL2023 without the EFA installer: no libfabric-devel in the list.
        result, log, _ = self.setup("al2023", self.tmp / "no-efa", with_bazel=True)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertIn("required package(s) not in Amazon Linux 2023", result.stderr)
        self.assertIn(LIBFABRIC["al2023"], result.stderr)
        self.assertEqual(self.installs(log), [])
        # Ubuntu with universe off: no bazel-bootstrap, no CLI11 either.
        index = [n for n in fixture_names("ubuntu2404") if n != "bazel-bootstrap"]
        result, _, _ = self.setup("ubuntu2404", self.efa, index=index)
        self.assertEqual(result.returncode, 1)
        self.assertIn("bazel-bootstrap", result.stderr)
        self.assertIn("add-apt-repository universe", result.stderr)

    def test_without_the_efa_installer_the_distributions_libfabric_is_installed(self):
        for system in ("debian12", "ubuntu2204", "ubuntu2404"):
            with self.subTest(system=system):
                index = fixture_names(system) + ["libfabric-bin"]  # not looked up on Ubuntu
                result, log, _ = self.setup(system, self.tmp / "no-efa", with_bazel=True,
                                            index=index)
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
                self.assertIn(LIBFABRIC[system], self.installs(log))
                self.assertNotIn("EFA installer", result.stdout)
                # Ubuntu 22.04's is 1.11 (its recorded list says so): too old.
                self.assertEqual("libfabric is 1.11" in result.stdout, system == "ubuntu2204")

    def test_dry_run_changes_nothing(self):
        for system in SYSTEMS:
            with self.subTest(system=system):
                result, log, case = self.setup(system, self.efa, args=["--dry-run"])
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
                self.assertEqual(self.installs(log), [])
                changes = ("apt-get", "curl", "dnf install")
                self.assertFalse([l for l in log if l.startswith(changes)], log)
                self.assertEqual(list((case / "bin").iterdir()), [])
                self.assertEqual(list((case / "include").iterdir()), [])
                self.assertIn("would install:", result.stdout)
                self.assertIn("dry run: nothing changed", result.stdout)

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
