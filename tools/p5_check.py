#!/usr/bin/env python3
"""Is this machine ready for the chapters over EFA? The command to run first on a p5.

  bazel run //tools:p5_check            # builds what it runs, then checks
  python3 tools/p5_check.py             # the same with what bazel-bin has

Seven checks, in this order, each PASS, FAIL with the fix, or SKIP with why
it could not be checked here:
  1. EFA installer: found, and its version (and its libfabric's)
  2. efa domains with FI_HMEM: fi_info -p efa -t FI_EP_RDM -c FI_HMEM lists
     32 rdmap* domains (efa removes FI_HMEM unless the query asks for it)
  3. libcudart loadable by libfabric: the installer's libfabric dlopens the
     unversioned libcudart.so; without it CUDA support stays off
  4. GPUDirect: a real efa endpoint accepts FI_HMEM_P2P_REQUIRED (p5_probe)
  5. GPU<->NIC grouping from hwloc: 8 groups of 4 NICs (common/topology, the
     code the chapters run)
  6. memlock limit: unlimited
  7. one-page loopback WRITE, GPU to GPU, verified: chapter 15's server and
     client on this host, over efa, with CUDA memory
A check whose ground is missing (no EFA device, no GPU) says SKIP and why,
never PASS. Exit status 0 when nothing FAILed. docs/running-on-p5.md walks
through it; docs/troubleshooting.md has every line it can print.

Without a p5, the options point it at stand-ins: --efa-prefix at another
libfabric prefix (CI's libfabric 2.1 build), --topology and --lspci at the
p5's saved topology (tests/fixtures), --loopback-provider shm with
--loopback-memory host at a provider that runs here.
"""
import argparse
import ctypes
import glob
import json
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent

INSTALLER_URL = "https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz"
AMAZON_VENDOR = "0x1d0f"  # PCI vendor id of EFA devices
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


def efa_nics(lspci_text):
    """The EFA NICs of an `lspci -t -v` tree: NAME=PCI_ADDRESS as fi_info would
    name them (rdmap<bus in decimal>s0), in PCI order."""
    nics = []
    for line in lspci_text.splitlines():
        m = re.search(r"\[([0-9a-f]{2})\]----00\.0\s+Amazon\.com, Inc\. Elastic Fabric Adapter",
                      line)
        if m:
            bus = int(m.group(1), 16)
            nics.append(f"rdmap{bus}s0=0000:{bus:02x}:00.0")
    return sorted(nics, key=lambda s: s.split("=")[1])


class Outcome:
    def __init__(self, status, text, fix=""):
        self.status, self.text, self.fix = status, text, fix


def passed(text):
    return Outcome(PASS, text)


def fail(text, fix):
    return Outcome(FAIL, text, fix)


def skip(text):
    return Outcome(SKIP, text)


class Machine:
    """What the checks read, with every path movable for tests."""

    def __init__(self, args):
        self.args = args
        self.sys_root = pathlib.Path(args.sys_root)
        self.prefix = pathlib.Path(args.efa_prefix)

    def efa_devices(self):
        """{name: PCI address} of the RDMA devices whose vendor is Amazon."""
        found = {}
        for dev in sorted(glob.glob(str(self.sys_root / "sys/class/infiniband/*"))):
            vendor = pathlib.Path(dev, "device", "vendor")
            if vendor.exists() and vendor.read_text().strip() == AMAZON_VENDOR:
                found[os.path.basename(dev)] = os.path.basename(os.path.realpath(
                    os.path.join(dev, "device")))
        return found

    def instance_type(self):
        if self.args.instance_type:
            return self.args.instance_type
        dmi = self.sys_root / "sys/devices/virtual/dmi/id/product_name"
        return dmi.read_text().strip() if dmi.exists() else ""

    def expects_efa(self):
        """An EFA device, or an instance type that has them (a p5 without its
        interfaces must FAIL, not SKIP)."""
        return bool(self.efa_devices()) or self.instance_type().startswith("p5")

    def gpus(self):
        return sorted(glob.glob(str(self.sys_root / "proc/driver/nvidia/gpus/*")))

    def fi_info(self):
        path = self.prefix / "bin" / "fi_info"
        return path if path.exists() else None

    def libfabric(self):
        for sub in ("lib64", "lib"):
            found = sorted(glob.glob(str(self.prefix / sub / "libfabric.so.1*")))
            if found:
                return pathlib.Path(found[0])
        return None

    def run(self, cmd, timeout=60, env=None):
        lib = self.libfabric()
        full_env = dict(os.environ)
        if lib is not None:
            full_env["LD_LIBRARY_PATH"] = ":".join(
                p for p in (str(lib.parent), os.environ.get("LD_LIBRARY_PATH", "")) if p)
        full_env.update(env or {})
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                              timeout=timeout, env=full_env)


def no_efa_here(m):
    return skip("no EFA device on this machine (no RDMA device of vendor %s under %s, instance "
                "type '%s'): checked on a p5 only" % (AMAZON_VENDOR,
                                                       m.sys_root / "sys/class/infiniband",
                                                       m.instance_type() or "unknown"))


# --- 1 ---------------------------------------------------------------------------------------
def check_installer(m):
    lib, fi_info = m.libfabric(), m.fi_info()
    version_file = m.prefix.parent / "efa_installed_packages"
    installer = ""
    if version_file.exists():
        found = re.search(r"EFA installer version:\s*(\S+)", version_file.read_text())
        installer = found.group(1) if found else "?"
    libfabric = ""
    if fi_info is not None:
        out = m.run([fi_info, "--version"], timeout=30).stdout
        found = re.search(r"libfabric:\s*(\S+)", out)
        libfabric = found.group(1) if found else "?"
    if lib is None or fi_info is None:
        if not m.expects_efa():
            return skip("no libfabric in %s and no EFA device here: nothing to check" % m.prefix)
        return fail("no EFA installer in %s (no bin/fi_info or lib*/libfabric.so.1)" % m.prefix,
                    "install it: curl -O %s && tar -xf aws-efa-installer-latest.tar.gz && "
                    "cd aws-efa-installer && sudo ./efa_installer.sh -y (then log in again)"
                    % INSTALLER_URL)
    if installer:
        return passed("EFA installer %s, libfabric %s in %s (use the same installer version on "
                      "both hosts)" % (installer, libfabric, m.prefix))
    if m.expects_efa():
        return fail("EFA installer version unknown: no %s beside libfabric %s in %s"
                    % (version_file, libfabric, m.prefix),
                    "use the EFA installer's libfabric (%s), the same version on both hosts"
                    % INSTALLER_URL)
    return skip("not the EFA installer's libfabric: %s in %s (no %s beside it): fine without EFA"
                % (libfabric, m.prefix, version_file.name))


# --- 2 ---------------------------------------------------------------------------------------
def efa_domains(m, hmem):
    cmd = [m.fi_info(), "-p", "efa", "-t", "FI_EP_RDM"] + (["-c", "FI_HMEM"] if hmem else [])
    out = m.run(cmd, timeout=60).stdout
    names = set(re.findall(r"^\s*domain:\s*(rdmap\S+)", out, re.M))
    return sorted(names, key=lambda n: [int(d) if d.isdigit() else d
                                        for d in re.split(r"(\d+)", n)])


def check_domains(m):
    if m.fi_info() is None:
        return skip("no fi_info in %s/bin (check 1)" % m.prefix)
    if not m.expects_efa():
        return no_efa_here(m)
    want = m.args.expect_nics
    with_hmem = efa_domains(m, hmem=True)
    if len(with_hmem) == want:
        return passed("%d efa domains with FI_HMEM (%s ... %s)" % (want, with_hmem[0],
                                                                    with_hmem[-1]))
    plain = efa_domains(m, hmem=False)
    if not plain:
        return fail("efa lists no domain: fi_info -p efa -t FI_EP_RDM found no EFA NIC",
                    "launch the instance with its EFA interfaces (network cards 0-31, interface "
                    "type efa or efa-only) and check the driver: lsmod | grep efa")
    if not with_hmem:
        return fail("efa domains with FI_HMEM: none of the %d efa domains offers FI_HMEM (GPU "
                    "memory)" % len(plain),
                    "libfabric's CUDA support is off: see check 3 (libcudart.so); "
                    "FI_LOG_LEVEL=info fi_info -p efa -t FI_EP_RDM -c FI_HMEM says why")
    return fail("efa domains with FI_HMEM: %d, below the %d NICs of a p5" % (len(with_hmem), want),
                "launch with all %d EFA interfaces (network cards 0-%d, interface type efa or "
                "efa-only; with several interfaces there is no automatic public IP)"
                % (want, want - 1))


# --- 3 ---------------------------------------------------------------------------------------
def cudart_candidates():
    dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
    dirs += sorted(glob.glob("/usr/local/cuda-*/lib64"))
    return [f for d in dirs for f in sorted(glob.glob(os.path.join(d, "libcudart.so*")))]


def check_cudart(m):
    lib = m.libfabric()
    if lib is None:
        return skip("no libfabric in %s (check 1)" % m.prefix)
    if not m.gpus():
        return skip("no NVIDIA GPU here (%s is empty): CUDA support is checked on a p5"
                    % (m.sys_root / "proc/driver/nvidia/gpus"))
    if b"libcudart.so" not in lib.read_bytes():
        return fail("this libfabric was built without CUDA support: %s" % lib,
                    "use the EFA installer's libfabric (/opt/amazon/efa), which loads CUDA")
    try:
        ctypes.CDLL(m.args.cudart_name)
        return passed("libfabric can load %s (CUDA support on)" % m.args.cudart_name)
    except OSError:
        pass
    found = cudart_candidates()
    unversioned = [f for f in found if f.endswith("libcudart.so")]
    if unversioned:
        fix = "export LD_LIBRARY_PATH=%s:$LD_LIBRARY_PATH" % os.path.dirname(unversioned[0])
    elif found:
        fix = ("only %s here: the unversioned link comes with the CUDA toolkit's cudart "
               "development package (cuda-cudart-dev-<version>); install it, or "
               "ln -s %s %s/libcudart.so" % (found[0], os.path.basename(found[0]),
                                            os.path.dirname(found[0])))
    else:
        fix = "install the CUDA toolkit and put its lib64 on LD_LIBRARY_PATH"
    return fail("libfabric cannot load libcudart.so (it dlopens that unversioned name; without "
                "it CUDA support stays off and efa refuses FI_HMEM)", fix)


# --- 4 ---------------------------------------------------------------------------------------
def check_gpudirect(m):
    if not m.expects_efa() and m.args.probe_provider == "efa":
        return no_efa_here(m)
    probe = pathlib.Path(m.args.probe)
    if not probe.exists():
        return skip("%s not built: bazel build //tools:p5_probe" % probe)
    out = m.run([probe, "gpudirect", "--provider", m.args.probe_provider], timeout=60)
    line = (out.stdout.strip().splitlines() or [out.stderr.strip()])[-1]
    if out.returncode == 0:
        return passed("GPUDirect RDMA: FI_HMEM_P2P_REQUIRED %s" % line)
    if out.returncode == 1:
        return fail("GPUDirect RDMA is off: efa refused FI_HMEM_P2P_REQUIRED (%s)" % line,
                    "load nvidia-peermem (sudo modprobe nvidia-peermem) or use a driver with "
                    "dma-buf (NVIDIA open kernel modules); FI_LOG_LEVEL=info fi_info -p efa "
                    "2>&1 | grep -i p2p says which registration failed")
    return fail("GPUDirect: no efa endpoint with FI_HMEM to ask (%s)" % line,
                "fix checks 2 and 3 first")


# --- 5 ---------------------------------------------------------------------------------------
def live_topology(tmp):
    for tool in ("lstopo-no-graphics", "lstopo", "hwloc-ls"):
        out = subprocess.run(["sh", "-c", "command -v %s" % tool], capture_output=True, text=True)
        if out.returncode == 0:
            path = os.path.join(tmp, "topology.xml")
            subprocess.run([tool, "--whole-io", "--of", "xml", path], capture_output=True,
                           timeout=120)
            return path if os.path.exists(path) else None
    return None


def check_grouping(m):
    dump = pathlib.Path(m.args.topology_dump)
    if not dump.exists():
        return skip("%s not built: bazel build //tools:topology_dump" % dump)
    with tempfile.TemporaryDirectory() as tmp:
        if m.args.topology:
            xml, source = m.args.topology, "saved topology %s" % m.args.topology
        else:
            xml, source = live_topology(tmp), "this machine (lstopo)"
            if xml is None:
                return skip("no lstopo to read this machine's topology (install hwloc)")
        if m.args.lspci:
            nics = efa_nics(pathlib.Path(m.args.lspci).read_text())
        else:
            nics = ["%s=%s" % kv for kv in m.efa_devices().items()]
        if not nics:
            return no_efa_here(m)
        out = subprocess.run([str(dump), xml, *nics], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return fail("GPU<->NIC grouping: topology_dump failed: %s" % out.stderr.strip()[-300:],
                    "check that hwloc sees the PCI tree: lstopo --whole-io")
    groups = json.loads(out.stdout)["groups"]
    sizes = [len(g["nics"]) for g in groups]
    want_gpus, want_nics = m.args.expect_gpus, m.args.expect_nics // m.args.expect_gpus
    if len(groups) == want_gpus and all(s == want_nics for s in sizes):
        return passed("%d groups of %d NICs from hwloc (%s)" % (want_gpus, want_nics, source))
    return fail("GPU<->NIC grouping is not %d groups of %d: %d GPU(s) with %s NICs (%s)"
                % (want_gpus, want_nics, len(groups), "+".join(map(str, sizes)) or "no", source),
                "the chapters give each GPU the NICs behind its PCIe switch: check lstopo "
                "--whole-io shows 8 GPUs and 32 EFA NICs, and checks 1-2")


# --- 6 ---------------------------------------------------------------------------------------
def check_memlock(m):
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY:
        return passed("memlock limit unlimited")
    return fail("memlock limit is %d KiB, not unlimited: efa pins its queues, bounce buffers and "
                "registrations" % (soft // 1024),
                "ulimit -l unlimited (as root, or '* soft memlock unlimited' and '* hard memlock "
                "unlimited' in /etc/security/limits.d/, which the EFA installer writes; in a "
                "container: docker run --ulimit memlock=-1:-1)")


# --- 7 ---------------------------------------------------------------------------------------
def loopback_hint(text):
    if "fi_writemsg" in text and "Operation not supported" in text:
        return ("a WRITE with immediate data was refused (-FI_EOPNOTSUPP): the two sides differ "
                "on unsolicited write recv; install the same EFA installer version on both "
                "hosts, or set FI_EFA_USE_UNSOLICITED_WRITE_RECV=0 on both")
    return "the server's and client's lines above say what failed; fix the FAIL lines before it"


def check_loopback(m):
    provider, memory = m.args.loopback_provider, m.args.loopback_memory
    if provider == "efa" and not m.expects_efa():
        return no_efa_here(m)
    if provider == "efa" and memory == "cuda" and not m.gpus():
        return skip("no NVIDIA GPU here: the GPU-to-GPU WRITE runs on a p5")
    bin_dir = pathlib.Path(m.args.bin_dir)
    server_bin, client_bin = bin_dir / "server", bin_dir / "client"
    if not (server_bin.exists() and client_bin.exists()):
        return skip("%s/server and client not built: bazel build //chapters/15_lazy:all" % bin_dir)
    common = ["--provider", provider, "--memory", memory, "--gpus", "1", "--nics-per-gpu", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        address = pathlib.Path(tmp) / "address"
        env = dict(os.environ)
        lib = m.libfabric()
        if lib is not None:
            env["LD_LIBRARY_PATH"] = ":".join(
                p for p in (str(lib.parent), os.environ.get("LD_LIBRARY_PATH", "")) if p)
        server = subprocess.Popen([str(server_bin), *common, "--once", "--repeat", "1",
                                   "--address-file", str(address)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            for _ in range(600):  # 60 s at most
                if (address.exists() and address.read_text().strip()) or server.poll() is not None:
                    break
                time.sleep(0.1)
            if server.poll() is not None:
                text = server.communicate()[0].strip()
                last = text.splitlines()[-1] if text else "(no output)"
                return fail("loopback WRITE: the server stopped before it listened: %s" % last,
                            loopback_hint(text))
            client = subprocess.run(
                [str(client_bin), "--server", address.read_text().strip(), *common, "--pages", "1",
                 "--page-size", "65536", "--timeout", "60"],
                env=env, capture_output=True, text=True, timeout=120)
            server_out = server.communicate(timeout=60)[0]
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    text = client.stdout + client.stderr
    if client.returncode == 0:
        return passed("one 64 KiB page written %s memory to %s memory over %s and verified"
                      % (memory, memory, provider))
    last = (text.strip().splitlines() or ["(no output)"])[-1]
    return fail("loopback WRITE failed: %s" % last, loopback_hint(text + server_out))


CHECKS = [
    ("EFA installer", check_installer),
    ("efa domains with FI_HMEM", check_domains),
    ("libcudart for libfabric", check_cudart),
    ("GPUDirect RDMA", check_gpudirect),
    ("GPU<->NIC groups", check_grouping),
    ("memlock limit", check_memlock),
    ("loopback WRITE", check_loopback),
]


def bazel_bin(*parts):
    runfiles = pathlib.Path(os.environ.get("RUNFILES_DIR", "")) / "libfabric_tutorial"
    for base in (runfiles, ROOT / "bazel-bin"):
        path = base.joinpath(*parts)
        if path.exists():
            return str(path)
    return str((ROOT / "bazel-bin").joinpath(*parts))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split(
        "\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--efa-prefix", default=os.environ.get("EFA_PREFIX", "/opt/amazon/efa"),
                   help="the EFA installer's prefix (default /opt/amazon/efa)")
    p.add_argument("--topology", help="a saved hwloc XML instead of this machine's (lstopo)")
    p.add_argument("--lspci", help="an `lspci -t -v` tree naming the EFA NICs, with --topology")
    p.add_argument("--expect-gpus", type=int, default=8)
    p.add_argument("--expect-nics", type=int, default=32)
    p.add_argument("--bin-dir", default=bazel_bin("chapters", "15_lazy"),
                   help="where chapter 15's server and client are")
    p.add_argument("--probe", default=bazel_bin("tools", "p5_probe"))
    p.add_argument("--topology-dump", default=bazel_bin("tools", "topology_dump"))
    p.add_argument("--loopback-provider", default="efa")
    p.add_argument("--loopback-memory", default="cuda", choices=["cuda", "host"])
    # Stand-ins for tests: another /, another instance type, another probe provider.
    p.add_argument("--sys-root", default="/", help=argparse.SUPPRESS)
    p.add_argument("--instance-type", default="", help=argparse.SUPPRESS)
    p.add_argument("--probe-provider", default="efa", help=argparse.SUPPRESS)
    p.add_argument("--cudart-name", default="libcudart.so", help=argparse.SUPPRESS)
    p.add_argument("--only", help="run only these checks (comma-separated numbers)")
    return p.parse_args(argv)


def main(argv=None):
    # `bazel run` starts in the runfiles; the user's relative paths mean theirs.
    if os.environ.get("BUILD_WORKING_DIRECTORY"):
        os.chdir(os.environ["BUILD_WORKING_DIRECTORY"])
    args = parse_args(argv)
    m = Machine(args)
    only = {int(n) for n in args.only.split(",")} if args.only else None
    print("p5_check: is this machine ready for the chapters over EFA? (libfabric from %s)"
          % args.efa_prefix)
    counts = {PASS: 0, FAIL: 0, SKIP: 0}
    for number, (name, check) in enumerate(CHECKS, 1):
        if only and number not in only:
            continue
        try:
            outcome = check(m)
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            outcome = fail("%s: the check itself failed: %s" % (name, e),
                           "run it again; if it repeats, report it with this line")
        counts[outcome.status] += 1
        print("%d. %-26s %s  %s" % (number, name, outcome.status, outcome.text))
        if outcome.fix:
            print("   fix: %s" % outcome.fix)
        sys.stdout.flush()
    verdict = "ready" if counts[FAIL] == 0 and counts[SKIP] == 0 else (
        "not ready: fix the FAIL lines in order" if counts[FAIL] else
        "nothing failed, but the SKIP lines were not checked here")
    print("p5_check: %d PASS, %d FAIL, %d SKIP: %s" % (counts[PASS], counts[FAIL], counts[SKIP],
                                                       verdict))
    return 1 if counts[FAIL] else 0


if __name__ == "__main__":
    sys.exit(main())
