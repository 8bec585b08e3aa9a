#!/usr/bin/env python3
"""Writes the hwloc XML topologies that tests/topology_test.cc loads.

  tests/fixtures/p5.48xlarge.xml     an AWS p5.48xlarge, built from the PCI tree
                                     that `lspci -t -v` printed on a real one
                                     (tests/fixtures/p5-lspci.txt)
  tests/fixtures/gpu-box-no-rdma.xml a small made-up box: 2 GPUs, one NUMA node,
                                     32 cores, Ethernet only (no RDMA NIC)

Usage (from the repository root):

  python3 maint/make_topology_fixture.py [--check-sysfs ls_sys_bus_pci_devices.txt]

--check-sysfs compares the parsed PCI tree with an `ls -l /sys/bus/pci/devices`
listing of the same machine: every device must be there, under the same parent.

What the PCI tree does not say comes from these rules, each written down where
it is applied:
  * NUMA node of a host bridge: the p5 convention, root buses below 0x80 on
    node 0, the others on node 1 (so GPUs 0-3 are on node 0, 4-7 on node 1).
  * CPUs: 2 packages of 48 physical cores with 2 hardware threads each (192
    vCPUs); Linux numbers the first thread of every core first, so core c has
    PUs c and c+96 (node 0 = CPUs 0-47,96-143).
  * PCI ids: looked up by the device names lspci printed (table below); lspci -t
    names no bridge, so bridges get ids 0000:0000.
  * EFA OS devices are named rdmap<bus in decimal>s0, as fi_info shows
    (rdmap79s0 is 0000:4f:00.0).
"""

import argparse
import os
import re
import sys
from xml.sax.saxutils import quoteattr

# Device names as lspci prints them -> (class, vendor id, device id, vendor, device).
PCI_IDS = {
    "NVIDIA Corporation GH100 [H100 SXM5 80GB]":
        (0x0302, 0x10DE, 0x2330, "NVIDIA Corporation", "GH100 [H100 SXM5 80GB]"),
    "NVIDIA Corporation GH100 [H100 NVSwitch]":
        (0x0680, 0x10DE, 0x22A3, "NVIDIA Corporation", "GH100 [H100 NVSwitch]"),
    "Amazon.com, Inc. Elastic Fabric Adapter (EFA)":
        (0x0200, 0x1D0F, 0xEFA1, "Amazon.com, Inc.", "Elastic Fabric Adapter (EFA)"),
    "Amazon.com, Inc. Elastic Network Adapter (ENA)":
        (0x0200, 0x1D0F, 0xEC20, "Amazon.com, Inc.", "Elastic Network Adapter (ENA)"),
    "Amazon.com, Inc. NVMe SSD Controller":
        (0x0108, 0x1D0F, 0xCD01, "Amazon.com, Inc.", "NVMe SSD Controller"),
    "Amazon.com, Inc. NVMe EBS Controller":
        (0x0108, 0x1D0F, 0x8061, "Amazon.com, Inc.", "NVMe EBS Controller"),
    "Amazon.com, Inc. Device 1111":
        (0x0300, 0x1D0F, 0x1111, "Amazon.com, Inc.", "Device 1111"),
    "Intel Corporation 440FX - 82441FX PMC [Natoma]":
        (0x0600, 0x8086, 0x1237, "Intel Corporation", "440FX - 82441FX PMC [Natoma]"),
    "Intel Corporation 82371SB PIIX3 ISA [Natoma/Triton II]":
        (0x0601, 0x8086, 0x7000, "Intel Corporation", "82371SB PIIX3 ISA [Natoma/Triton II]"),
    "Intel Corporation 82371AB/EB/MB PIIX4 ACPI":
        (0x0680, 0x8086, 0x7113, "Intel Corporation", "82371AB/EB/MB PIIX4 ACPI"),
    # Only in the made-up gpu-box.
    "NVIDIA Corporation GH100 [H200 SXM 141GB]":
        (0x0302, 0x10DE, 0x2335, "NVIDIA Corporation", "GH100 [H200 SXM 141GB]"),
    "Intel Corporation Ethernet Controller E810-C for QSFP":
        (0x0200, 0x8086, 0x1592, "Intel Corporation", "Ethernet Controller E810-C for QSFP"),
    "ASPEED Technology, Inc. ASPEED Graphics Family":
        (0x0300, 0x1A03, 0x2000, "ASPEED Technology, Inc.", "ASPEED Graphics Family"),
    "Samsung Electronics Co Ltd NVMe SSD Controller PM174X":
        (0x0108, 0x144D, 0xA826, "Samsung Electronics Co Ltd", "NVMe SSD Controller PM174X"),
}

EFA_NAME = "Amazon.com, Inc. Elastic Fabric Adapter (EFA)"


class PciNode:
    """A host bridge (address None), a PCI-to-PCI bridge or a PCI device."""

    def __init__(self, domain, bus, device=None, function=None):
        self.domain, self.bus, self.device, self.function = domain, bus, device, function
        self.secondary = self.subordinate = None  # bridges only
        self.name = None                           # devices only
        self.os_device = None                      # (name, hwloc osdev type) or None
        self.children = []

    @property
    def is_host_bridge(self):
        return self.device is None

    @property
    def is_bridge(self):
        return self.is_host_bridge or self.secondary is not None

    def address(self):
        return "%04x:%02x:%02x.%x" % (self.domain, self.bus, self.device, self.function)


# ---------------------------------------------------------------------------
# Parsing `lspci -t -v`
# ---------------------------------------------------------------------------

# A root "[dddd:bb]", a bridge's bus range "[ss]" or "[ss-uu]", or a device
# "dd.f" with an optional name that runs to the end of the line.
TOKEN = re.compile(
    r"\[(?P<domain>[0-9a-f]{4}):(?P<root>[0-9a-f]{2})\]"
    r"|\[(?P<secondary>[0-9a-f]{2})(?:-(?P<subordinate>[0-9a-f]{2}))?\]"
    r"|(?P<device>[0-9a-f]{2})\.(?P<function>[0-7])(?:  (?P<name>.+))?")


def parse_lspci_tree(text):
    """Returns the host bridges of an `lspci -t -v` tree, children filled in.

    lspci draws the devices of one bus in one column: the first one right after
    the bracket that names the bus, the others below it on later lines. So the
    bus of a device is the bracket just before it on its line or, when there is
    none, the bus last seen in that column.
    """
    host_bridges = []
    bus_owner = {}      # bus number -> the (host) bridge whose secondary bus it is
    bus_in_column = {}  # column -> bus of the devices drawn there
    domain = 0
    for line in text.splitlines():
        pending_bus = None  # set by a bracket, taken by the next device
        last_device = None
        for match in TOKEN.finditer(line):
            if match.group("root"):
                domain = int(match.group("domain"), 16)
                root = PciNode(domain, int(match.group("root"), 16))
                host_bridges.append(root)
                bus_owner[root.bus] = root
                pending_bus = root.bus
            elif match.group("secondary"):
                bridge = last_device
                bridge.secondary = int(match.group("secondary"), 16)
                bridge.subordinate = int(match.group("subordinate") or match.group("secondary"), 16)
                bus_owner[bridge.secondary] = bridge
                pending_bus = bridge.secondary
            else:
                column = match.start()
                if pending_bus is not None:
                    bus_in_column[column] = pending_bus
                    pending_bus = None
                bus = bus_in_column[column]
                node = PciNode(domain, bus, int(match.group("device"), 16),
                               int(match.group("function"), 16))
                node.name = match.group("name")
                bus_owner[bus].children.append(node)
                last_device = node
    for root in host_bridges:
        root.secondary = root.bus
        root.subordinate = max([root.bus] + [n.subordinate for n in walk(root) if n.is_bridge])
    return host_bridges


def walk(node):
    for child in node.children:
        yield child
        yield from walk(child)


def check_against_sysfs(host_bridges, listing):
    """Compares the tree with `ls -l /sys/bus/pci/devices` of the same machine."""
    sysfs_parent = {}
    for line in listing.splitlines():
        match = re.search(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) -> \S*devices/(\S+)$", line)
        if match:
            path = match.group(2).split("/")
            # pci0000:44/0000:44:00.0/0000:45:00.0: the parent is the previous
            # component, or the host bridge "pci0000:44" for a root device.
            sysfs_parent[match.group(1)] = path[-2].replace("pci", "host ")
    tree_parent = {}
    for root in host_bridges:
        def visit(node, parent_name):
            for child in node.children:
                tree_parent[child.address()] = parent_name
                visit(child, child.address())
        visit(root, "host %04x:%02x" % (root.domain, root.bus))
    if tree_parent != sysfs_parent:
        missing = sorted(set(sysfs_parent) ^ set(tree_parent))
        moved = sorted(a for a in set(sysfs_parent) & set(tree_parent)
                       if sysfs_parent[a] != tree_parent[a])
        sys.exit("lspci tree and sysfs listing disagree: only in one: %s; other parent: %s"
                 % (missing[:10], moved[:10]))
    print("sysfs listing agrees: %d devices" % len(tree_parent))


# ---------------------------------------------------------------------------
# Writing hwloc XML (version 2 format, as hwloc 2.x exports it)
# ---------------------------------------------------------------------------

def bitmap(indexes):
    """hwloc's bitmap syntax: 32-bit hex words, most significant first."""
    indexes = list(indexes)
    if not indexes:
        return "0x0"
    words = [0] * (max(indexes) // 32 + 1)
    for i in indexes:
        words[i // 32] |= 1 << (i % 32)
    return ",".join("0x%08x" % w for w in reversed(words))


class XmlWriter:
    def __init__(self):
        self.lines = []
        self.next_gp_index = 1

    def open(self, depth, attributes, children=True):
        attributes = dict(attributes)
        attributes["gp_index"] = str(self.next_gp_index)
        self.next_gp_index += 1
        text = " ".join("%s=%s" % (k, quoteattr(v)) for k, v in attributes.items())
        self.lines.append("  " * depth + "<object %s%s>" % (text, "" if children else "/"))

    def close(self, depth):
        self.lines.append("  " * depth + "</object>")

    def info(self, depth, name, value):
        self.lines.append("  " * depth + "<info name=%s value=%s/>" % (quoteattr(name), quoteattr(value)))


def sets(cpus, nodes):
    return {"cpuset": bitmap(cpus), "complete_cpuset": bitmap(cpus),
            "nodeset": bitmap(nodes), "complete_nodeset": bitmap(nodes)}


def write_pci(xml, node, depth, bridge_depth):
    if node.is_host_bridge:
        xml.open(depth, {"type": "Bridge", "bridge_type": "0-1", "depth": "0",
                         "bridge_pci": "%04x:[%02x-%02x]" % (node.domain, node.secondary, node.subordinate)})
    elif node.is_bridge:
        xml.open(depth, {"type": "Bridge", "pci_busid": node.address(),
                         "pci_type": "0604 [0000:0000] [0000:0000] 00",
                         "bridge_type": "1-1", "depth": str(bridge_depth),
                         "bridge_pci": "%04x:[%02x-%02x]" % (node.domain, node.secondary, node.subordinate)})
    else:
        if node.name not in PCI_IDS:
            sys.exit("no PCI ids known for %r (%s): add it to PCI_IDS" % (node.name, node.address()))
        class_id, vendor_id, device_id, vendor, device = PCI_IDS[node.name]
        xml.open(depth, {"type": "PCIDev", "pci_busid": node.address(),
                         "pci_type": "%04x [%04x:%04x] [%04x:%04x] 00" % (class_id, vendor_id, device_id,
                                                                         vendor_id, 0)})
        xml.info(depth + 1, "PCIVendor", vendor)
        xml.info(depth + 1, "PCIDevice", device)
        if node.os_device:
            name, osdev_type = node.os_device
            xml.open(depth + 1, {"type": "OSDev", "name": name, "osdev_type": str(osdev_type)},
                     children=False)
        xml.close(depth)
        return
    for child in node.children:
        write_pci(xml, child, depth + 1, bridge_depth + 1)
    xml.close(depth)


def write_topology(path, description, packages, threads_of_core, cores_per_l3=None):
    """packages: list of (cores in package, [host bridges]); one NUMA node per package.

    threads_of_core(global core index) -> OS indexes of its PUs.
    """
    xml = XmlWriter()
    all_cpus = [pu for p in range(sum(n for n, _ in packages)) for pu in threads_of_core(p)]
    machine = sets(all_cpus, range(len(packages)))
    machine.update({"allowed_cpuset": machine["cpuset"], "allowed_nodeset": machine["nodeset"]})
    xml.lines += ['<?xml version="1.0" encoding="UTF-8"?>',
                  '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
                  '<topology version="2.0">']
    xml.open(1, dict({"type": "Machine", "os_index": "0"}, **machine))
    xml.info(2, "TopologyFixture", description)
    first_core = 0
    for package_index, (core_count, host_bridges) in enumerate(packages):
        cores = range(first_core, first_core + core_count)
        first_core += core_count
        package_cpus = [pu for c in cores for pu in threads_of_core(c)]
        node_sets = sets(package_cpus, [package_index])
        xml.open(2, dict({"type": "Package", "os_index": str(package_index)}, **node_sets))
        xml.open(3, dict({"type": "NUMANode", "os_index": str(package_index)}, **node_sets), children=False)
        groups = [list(cores)]
        if cores_per_l3:
            groups = [list(cores[i:i + cores_per_l3]) for i in range(0, core_count, cores_per_l3)]
        for group in groups:
            depth = 3
            if cores_per_l3:
                l3_cpus = [pu for c in group for pu in threads_of_core(c)]
                xml.open(3, dict({"type": "L3Cache", "cache_size": str(32 << 20), "depth": "3",
                                  "cache_linesize": "64", "cache_associativity": "16",
                                  "cache_type": "0"}, **sets(l3_cpus, [package_index])))
                depth = 4
            for core in group:
                xml.open(depth, dict({"type": "Core", "os_index": str(core - cores[0])},
                                     **sets(threads_of_core(core), [package_index])))
                for pu in threads_of_core(core):
                    xml.open(depth + 1, dict({"type": "PU", "os_index": str(pu)},
                                             **sets([pu], [package_index])), children=False)
                xml.close(depth)
            if cores_per_l3:
                xml.close(3)
        for host_bridge in host_bridges:
            write_pci(xml, host_bridge, 3, 0)
        xml.close(2)
    xml.close(1)
    xml.lines.append("</topology>")
    with open(path, "w") as out:
        out.write("\n".join(xml.lines) + "\n")
    print("wrote %s" % path)


# ---------------------------------------------------------------------------
# The two fixtures
# ---------------------------------------------------------------------------

def make_p5(lspci_path, out_path, sysfs_listing=None):
    with open(lspci_path) as f:
        host_bridges = parse_lspci_tree(f.read())
    if sysfs_listing:
        with open(sysfs_listing) as f:
            check_against_sysfs(host_bridges, f.read())
    for root in host_bridges:
        for node in walk(root):
            if node.name == EFA_NAME:
                node.os_device = ("rdmap%ds0" % node.bus, 3)  # 3: HWLOC_OBJ_OSDEV_OPENFABRICS
    # The reference data does not say which NUMA node a host bridge is on. The
    # p5 convention: root buses below 0x80 on node 0, the others on node 1. It
    # is the root bus that counts: GPU 0000:86:00.0 sits behind root bus 0x77,
    # on node 0 with the other GPUs 0-3.
    by_node = [[], []]
    for root in sorted(host_bridges, key=lambda r: (r.domain, r.bus)):
        by_node[0 if root.bus < 0x80 else 1].append(root)
    cores_per_package = 48
    total_cores = 2 * cores_per_package
    write_topology(out_path,
                   "AWS p5.48xlarge, generated by maint/make_topology_fixture.py from "
                   "tests/fixtures/p5-lspci.txt",
                   [(cores_per_package, by_node[0]), (cores_per_package, by_node[1])],
                   lambda core: [core, core + total_cores])


def gpu_box_pci():
    """Host bridge 00: two GPUs and a dual-port Ethernet NIC, each behind its own
    root port; host bridge 40: the BMC's VGA and an NVMe drive."""
    def device(bus, name, function=0):
        node = PciNode(0, bus, 0, function)
        node.name = name
        return node

    def root_port(parent_bus, slot, children):
        port = PciNode(0, parent_bus, slot, 0)
        port.secondary = port.subordinate = children[0].bus
        port.children = children
        return port

    ethernet = "Intel Corporation Ethernet Controller E810-C for QSFP"
    host0 = PciNode(0, 0x00)
    host0.secondary, host0.subordinate = 0x00, 0x03
    host0.children = [
        root_port(0x00, 1, [device(0x01, "NVIDIA Corporation GH100 [H200 SXM 141GB]")]),
        root_port(0x00, 2, [device(0x02, "NVIDIA Corporation GH100 [H200 SXM 141GB]")]),
        root_port(0x00, 3, [device(0x03, ethernet, 0), device(0x03, ethernet, 1)]),
    ]
    host0.children[2].children[0].os_device = ("ens3f0", 2)  # 2: HWLOC_OBJ_OSDEV_NETWORK
    host0.children[2].children[1].os_device = ("ens3f1", 2)
    host40 = PciNode(0, 0x40)
    host40.secondary, host40.subordinate = 0x40, 0x42
    host40.children = [
        root_port(0x40, 1, [device(0x41, "ASPEED Technology, Inc. ASPEED Graphics Family")]),
        root_port(0x40, 2, [device(0x42, "Samsung Electronics Co Ltd NVMe SSD Controller PM174X")]),
    ]
    return [host0, host40]


def make_gpu_box(out_path):
    # Made up, modelled on the device machines: one package and NUMA node, 32
    # physical cores in two L3 groups, hardware threads numbered in pairs
    # (core c has PUs 2c and 2c+1), the other common Linux numbering.
    write_topology(out_path,
                   "made-up GPU box without RDMA NIC, generated by maint/make_topology_fixture.py",
                   [(32, gpu_box_pci())],
                   lambda core: [2 * core, 2 * core + 1],
                   cores_per_l3=16)


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    fixtures = os.path.join(repo, "tests", "fixtures")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lspci", default=os.path.join(fixtures, "p5-lspci.txt"),
                        help="`lspci -t -v` of a p5.48xlarge")
    parser.add_argument("--check-sysfs", metavar="LISTING",
                        help="`ls -l /sys/bus/pci/devices` of the same machine, to cross-check")
    parser.add_argument("--out-dir", default=fixtures)
    args = parser.parse_args()
    make_p5(args.lspci, os.path.join(args.out_dir, "p5.48xlarge.xml"), args.check_sysfs)
    make_gpu_box(os.path.join(args.out_dir, "gpu-box-no-rdma.xml"))


if __name__ == "__main__":
    main()
