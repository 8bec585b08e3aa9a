// Tests of common/topology: GPU/NIC/core groups on recorded topologies
// (tests/fixtures, made by maint/make_topology_fixture.py) and on this machine.
#include "common/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/errors.h"

namespace tutorial {
namespace {

// Bazel runs tests in the runfiles tree; a plain run starts in the repository root.
std::string FixturePath(const std::string& name) {
  const std::string relative = "tests/fixtures/" + name;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  if (srcdir == nullptr) return relative;
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return std::string(srcdir) + "/" + (workspace ? workspace : "libfabric_tutorial") + "/" + relative;
}

std::string Hex(unsigned bus) {
  char text[16];
  std::snprintf(text, sizeof(text), "0000:%02x:00.0", bus);
  return text;
}

// What tests/fixtures/p5-lspci.txt shows: behind each PCIe switch one H100
// and four EFA NICs (buses, in hex). The GPUs are listed in PCI order, which
// is CUDA's order.
struct P5Switch {
  unsigned gpu_bus;
  std::vector<unsigned> efa_buses;
};
const std::vector<P5Switch> kP5Switches = {
    {0x53, {0x4f, 0x50, 0x51, 0x52}}, {0x64, {0x60, 0x61, 0x62, 0x63}},
    {0x75, {0x71, 0x72, 0x73, 0x74}}, {0x86, {0x82, 0x83, 0x84, 0x85}},
    {0x97, {0x93, 0x94, 0x95, 0x96}}, {0xa8, {0xa4, 0xa5, 0xa6, 0xa7}},
    {0xb9, {0xb5, 0xb6, 0xb7, 0xb8}}, {0xca, {0xc6, 0xc7, 0xc8, 0xc9}},
};

// The 32 EFA NICs as fi_info names them (rdmap<bus in decimal>s0), listed
// in reverse so that the tests see BuildGroups order them by PCI address.
std::vector<NicDescription> P5EfaNics() {
  std::vector<NicDescription> nics;
  for (const P5Switch& pcie_switch : kP5Switches) {
    for (unsigned bus : pcie_switch.efa_buses) {
      nics.push_back({"rdmap" + std::to_string(bus) + "s0", Hex(bus), 100});
    }
  }
  std::reverse(nics.begin(), nics.end());
  return nics;
}

std::vector<std::string> NicAddresses(const Group& group, const std::vector<NicDescription>& nics) {
  std::vector<std::string> addresses;
  for (size_t index : group.nics) addresses.push_back(nics.at(index).pci_address);
  return addresses;
}

std::vector<std::string> ProviderNics(const std::string& provider, size_t count,
                                      std::vector<NicDescription>* nics) {
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    nics->push_back({provider + ":" + std::to_string(i), "", 0});
    names.push_back(nics->back().name);
  }
  return names;
}

std::vector<int> Range(int first, int count, int step = 1) {
  std::vector<int> values;
  for (int i = 0; i < count; ++i) values.push_back(first + i * step);
  return values;
}

// No core in two groups, and none of them empty.
void ExpectDisjointCores(const std::vector<Group>& groups) {
  std::set<int> seen;
  for (const Group& group : groups) {
    EXPECT_FALSE(group.cores.empty());
    for (int core : group.cores) EXPECT_TRUE(seen.insert(core).second) << "core " << core << " twice";
  }
}

std::string ErrorOf(const std::function<void()>& action) {
  try {
    action();
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no UsageError)";
}

class P5Test : public ::testing::Test {
 protected:
  P5Test() : topology_(Topology::FromXml(FixturePath("p5.48xlarge.xml"))) {}
  Topology topology_;
  std::vector<NicDescription> efa_ = P5EfaNics();
};

TEST_F(P5Test, FindsTheEightH100sButNotTheNvSwitchesOrTheVgaDevice) {
  std::vector<std::string> expected;
  for (const P5Switch& pcie_switch : kP5Switches) expected.push_back(Hex(pcie_switch.gpu_bus));
  EXPECT_EQ(topology_.GpuPciAddresses(), expected);
}

TEST_F(P5Test, HasNinetySixPhysicalCores) {
  // 192 vCPUs; the second thread of core c is CPU c+96.
  EXPECT_EQ(topology_.PhysicalCores(), Range(0, 96));
}

TEST_F(P5Test, EachGpuGetsTheFourEfaNicsBehindItsSwitch) {
  const std::vector<Group> groups = topology_.BuildGroups(topology_.GpuPciAddresses(), efa_, {});
  ASSERT_EQ(groups.size(), 8u);
  for (size_t g = 0; g < groups.size(); ++g) {
    SCOPED_TRACE("GPU " + std::to_string(g));
    EXPECT_EQ(groups[g].cuda_device, static_cast<int>(g));
    EXPECT_EQ(groups[g].gpu_pci_address, Hex(kP5Switches[g].gpu_bus));
    std::vector<std::string> expected;
    for (unsigned bus : kP5Switches[g].efa_buses) expected.push_back(Hex(bus));
    EXPECT_EQ(NicAddresses(groups[g], efa_), expected);
  }
}

TEST_F(P5Test, EachGpuGetsTwelveCoresOfItsNumaNode) {
  const std::vector<Group> groups = topology_.BuildGroups(topology_.GpuPciAddresses(), efa_, {});
  ASSERT_EQ(groups.size(), 8u);
  ExpectDisjointCores(groups);
  for (int g = 0; g < 8; ++g) {
    SCOPED_TRACE("GPU " + std::to_string(g));
    // GPUs 0-3 (root buses 0x44-0x77) on node 0, GPUs 4-7 (0x88-0xbb) on node 1.
    EXPECT_EQ(groups[g].numa_node, g / 4);
    // Node 0 has cores 0-47, node 1 cores 48-95: 12 for each of its 4 GPUs.
    EXPECT_EQ(groups[g].cores, Range(12 * g, 12));
  }
}

TEST_F(P5Test, TrimsToTheFirstGpusAndNics) {
  TopologyRequest request;
  request.gpus = 2;
  request.nics_per_gpu = 2;
  const std::vector<Group> groups = topology_.BuildGroups(topology_.GpuPciAddresses(), efa_, request);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(NicAddresses(groups[0], efa_), (std::vector<std::string>{"0000:4f:00.0", "0000:50:00.0"}));
  EXPECT_EQ(NicAddresses(groups[1], efa_), (std::vector<std::string>{"0000:60:00.0", "0000:61:00.0"}));
  // The cores were split among all four GPUs of node 0 before trimming.
  EXPECT_EQ(groups[0].cores, Range(0, 12));
  EXPECT_EQ(groups[1].cores, Range(12, 12));
}

TEST_F(P5Test, RefusesMoreGpusOrNicsThanExist) {
  TopologyRequest too_many_gpus;
  too_many_gpus.gpus = 9;
  EXPECT_EQ(ErrorOf([&] { topology_.BuildGroups(topology_.GpuPciAddresses(), efa_, too_many_gpus); }),
            "asked for 9 GPUs but this machine has 8");
  TopologyRequest too_many_nics;
  too_many_nics.nics_per_gpu = 5;
  EXPECT_EQ(ErrorOf([&] { topology_.BuildGroups(topology_.GpuPciAddresses(), efa_, too_many_nics); }),
            "asked for 5 NICs per GPU but GPU 0 (0000:53:00.0) has 4");
}

TEST_F(P5Test, AcceptsCudaStyleAddresses) {
  // cudaDeviceGetPCIBusId writes an 8-digit domain, in upper case.
  const std::vector<Group> groups = topology_.BuildGroups({"00000000:CA:00.0"}, efa_, {});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].gpu_pci_address, "0000:ca:00.0");
  EXPECT_EQ(groups[0].numa_node, 1);
  EXPECT_EQ(groups[0].cores, Range(48, 48));  // the only GPU given on node 1
  EXPECT_EQ(NicAddresses(groups[0], efa_),
            (std::vector<std::string>{"0000:c6:00.0", "0000:c7:00.0", "0000:c8:00.0", "0000:c9:00.0"}));
}

TEST_F(P5Test, RejectsUnknownOrMalformedAddresses) {
  EXPECT_EQ(ErrorOf([&] { topology_.BuildGroups({"0000:99:00.0"}, efa_, {}); }),
            "CUDA device 0 (0000:99:00.0) is not among the PCI devices of the topology");
  EXPECT_EQ(ErrorOf([&] { topology_.BuildGroups({"gpu0"}, efa_, {}); }),
            "bad PCI address 'gpu0' for CUDA device 0");
  EXPECT_EQ(ErrorOf([&] { topology_.BuildGroups({}, {{"x", "0000:ee:00.0", 0}}, {}); }),
            "none of the 1 NICs is among the PCI devices of the topology");
  EXPECT_EQ(ErrorOf([&] { topology_.BuildGroups({}, {{"a", "0000:4f:00.0", 0}, {"shm:0", "", 0}}, {}); }),
            "some NICs have a PCI address and some have none: use NICs of one provider");
}

TEST_F(P5Test, GpuWithoutNearbyNicFallsBackToItsNumaNode) {
  // Only the NICs behind GPU 0's switch: GPUs 1-3 (same node) share them.
  std::vector<NicDescription> first_switch;
  for (unsigned bus : kP5Switches[0].efa_buses) first_switch.push_back({"efa", Hex(bus), 0});
  const std::vector<std::string> all_gpus = topology_.GpuPciAddresses();
  const std::vector<std::string> node0_gpus(all_gpus.begin(), all_gpus.begin() + 4);
  const std::vector<Group> groups = topology_.BuildGroups(node0_gpus, first_switch, {});
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_EQ(groups[0].nics, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(groups[1].nics, (std::vector<size_t>{0}));
  EXPECT_EQ(groups[2].nics, (std::vector<size_t>{1}));
  EXPECT_EQ(groups[3].nics, (std::vector<size_t>{2, 3}));
  // GPUs of node 1 have no NIC on their node at all.
  EXPECT_EQ(ErrorOf([&] { topology_.BuildGroups(all_gpus, first_switch, {}); }),
            "GPU 4 (0000:97:00.0) has no NIC behind its PCIe switch or on its NUMA node");
  // ... which does not matter when they are trimmed away.
  TopologyRequest first_four;
  first_four.gpus = 4;
  EXPECT_EQ(topology_.BuildGroups(all_gpus, first_switch, first_four).size(), 4u);
}

TEST_F(P5Test, HostStandInsSpreadOverNumaNodesWithTheirNics) {
  TopologyRequest request;
  request.host_memory = true;
  request.gpus = 2;
  const std::vector<Group> two = topology_.BuildGroups(topology_.GpuPciAddresses(), efa_, request);
  ASSERT_EQ(two.size(), 2u);
  ExpectDisjointCores(two);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(two[g].cuda_device, -1);
    EXPECT_EQ(two[g].gpu_pci_address, "");
    EXPECT_EQ(two[g].numa_node, g);
    EXPECT_EQ(two[g].cores, Range(48 * g, 48));
    EXPECT_EQ(two[g].nics.size(), 16u);  // the EFA NICs of its node
  }
  request.gpus = 8;  // like the GPUs: 12 cores and 4 NICs each
  const std::vector<Group> eight = topology_.BuildGroups({}, efa_, request);
  ASSERT_EQ(eight.size(), 8u);
  ExpectDisjointCores(eight);
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(eight[g].numa_node, g / 4);
    EXPECT_EQ(eight[g].cores, Range(12 * g, 12));
    std::vector<std::string> expected;
    for (unsigned bus : kP5Switches[g].efa_buses) expected.push_back(Hex(bus));
    EXPECT_EQ(NicAddresses(eight[g], efa_), expected);
  }
}

TEST_F(P5Test, PrintsTheGroupTable) {
  TopologyRequest request;
  request.gpus = 1;
  request.nics_per_gpu = 2;
  std::ostringstream table;
  PrintGroups(table, topology_.BuildGroups(topology_.GpuPciAddresses(), efa_, request), efa_);
  EXPECT_EQ(table.str(),
            "GPU  PCI           NUMA  cores  NICs\n"
            "0    0000:53:00.0  0     0-11   rdmap79s0 (0000:4f:00.0), rdmap80s0 (0000:50:00.0)\n");
}

class GpuBoxTest : public ::testing::Test {
 protected:
  GpuBoxTest() : topology_(Topology::FromXml(FixturePath("gpu-box-no-rdma.xml"))) {}
  Topology topology_;
};

TEST_F(GpuBoxTest, ProviderNicsAreDealtOutInOrder) {
  std::vector<NicDescription> nics;
  ProviderNics("shm", 4, &nics);
  const std::vector<std::string> gpus = topology_.GpuPciAddresses();
  ASSERT_EQ(gpus, (std::vector<std::string>{"0000:01:00.0", "0000:02:00.0"}));  // not the ASPEED VGA
  const std::vector<Group> groups = topology_.BuildGroups(gpus, nics, {});  // 2 NICs per GPU by default
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].nics, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(groups[1].nics, (std::vector<size_t>{2, 3}));
  ExpectDisjointCores(groups);
  // 32 cores, numbered in pairs (core c has CPUs 2c and 2c+1): 16 each.
  EXPECT_EQ(groups[0].cores, Range(0, 16, 2));
  EXPECT_EQ(groups[1].cores, Range(32, 16, 2));
  EXPECT_EQ(groups[0].numa_node, 0);
  EXPECT_EQ(groups[1].numa_node, 0);

  TopologyRequest one_each;
  one_each.nics_per_gpu = 1;
  const std::vector<Group> trimmed = topology_.BuildGroups(gpus, nics, one_each);
  EXPECT_EQ(trimmed[0].nics, (std::vector<size_t>{0}));
  EXPECT_EQ(trimmed[1].nics, (std::vector<size_t>{1}));
}

TEST_F(GpuBoxTest, TooFewProviderNicsIsAnError) {
  std::vector<NicDescription> nics;
  ProviderNics("tcp", 3, &nics);
  EXPECT_EQ(ErrorOf([&] { topology_.BuildGroups(topology_.GpuPciAddresses(), nics, {}); }),
            "need 4 NICs (2 groups x 2) but only 3 were given");
  EXPECT_EQ(ErrorOf([&] { topology_.BuildGroups(topology_.GpuPciAddresses(), {}, {0, 1, false}); }),
            "asked for 1 NICs per GPU but no NIC was given");
}

TEST_F(GpuBoxTest, NoNicsGivesGroupsWithoutNics) {
  const std::vector<Group> groups = topology_.BuildGroups(topology_.GpuPciAddresses(), {}, {});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_TRUE(groups[0].nics.empty());
  EXPECT_TRUE(groups[1].nics.empty());
}

TEST_F(GpuBoxTest, EquallyNearPciNicsAreShared) {
  // A dual-port NIC on the GPUs' host bridge, behind neither GPU's port:
  // both GPUs are equally near, so each gets one port.
  const std::vector<NicDescription> nics = {{"ens3f1", "0000:03:00.1", 100}, {"ens3f0", "0000:03:00.0", 100}};
  const std::vector<Group> groups = topology_.BuildGroups(topology_.GpuPciAddresses(), nics, {});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(NicAddresses(groups[0], nics), (std::vector<std::string>{"0000:03:00.0"}));
  EXPECT_EQ(NicAddresses(groups[1], nics), (std::vector<std::string>{"0000:03:00.1"}));
}

TEST_F(GpuBoxTest, HostStandInsSplitTheCores) {
  std::vector<NicDescription> nics;
  ProviderNics("shm", 4, &nics);
  TopologyRequest request;
  request.host_memory = true;
  request.gpus = 2;
  const std::vector<Group> groups = topology_.BuildGroups(topology_.GpuPciAddresses(), nics, request);
  ASSERT_EQ(groups.size(), 2u);
  ExpectDisjointCores(groups);
  EXPECT_EQ(groups[0].cores, Range(0, 16, 2));
  EXPECT_EQ(groups[1].cores, Range(32, 16, 2));
  EXPECT_EQ(groups[1].nics, (std::vector<size_t>{2, 3}));

  std::ostringstream table;
  PrintGroups(table, groups, nics);
  EXPECT_EQ(table.str(),
            "GPU   PCI  NUMA  cores                                            NICs\n"
            "host  -    0     0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30       shm:0, shm:1\n"
            "host  -    0     32,34,36,38,40,42,44,46,48,50,52,54,56,58,60,62  shm:2, shm:3\n");
}

TEST(SyntheticTopologyTest, StandInsShareCoresWhenThereAreTooFew) {
  const Topology topology = Topology::FromSynthetic("pack:2 [numa] core:2 pu:2");
  TopologyRequest request;
  request.gpus = 6;  // 3 per node, 2 cores per node
  const std::vector<Group> groups = topology.BuildGroups({}, {}, request);
  ASSERT_EQ(groups.size(), 6u);
  const std::vector<std::vector<int>> expected = {{0}, {2}, {0}, {4}, {6}, {4}};
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(groups[g].numa_node, static_cast<int>(g / 3));
    EXPECT_EQ(groups[g].cores, expected[g]);
  }
}

TEST(SyntheticTopologyTest, OneStandInByDefaultWithAllCores) {
  const Topology topology = Topology::FromSynthetic("pack:2 [numa] core:3 pu:2");
  const std::vector<Group> three = topology.BuildGroups({}, {}, {3, 0, false});
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].cores, (std::vector<int>{0}));  // stand-ins 0, 1 on node 0
  EXPECT_EQ(three[1].cores, (std::vector<int>{2, 4}));
  EXPECT_EQ(three[2].cores, (std::vector<int>{6, 8, 10}));
  const std::vector<Group> one = topology.BuildGroups({}, {}, {});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].numa_node, 0);  // the first node only
  EXPECT_EQ(one[0].cores, (std::vector<int>{0, 2, 4}));
}

TEST(SyntheticTopologyTest, BadInputIsAUsageError) {
  EXPECT_THROW(Topology::FromSynthetic("not a topology"), UsageError);
  EXPECT_THROW(Topology::FromXml(FixturePath("no-such-file.xml")), UsageError);
}

TEST(FormatCoreListTest, CompressesRuns) {
  EXPECT_EQ(FormatCoreList({}), "");
  EXPECT_EQ(FormatCoreList({5}), "5");
  EXPECT_EQ(FormatCoreList({0, 1, 2, 3, 48, 49, 50}), "0-3,48-50");
  EXPECT_EQ(FormatCoreList({0, 2, 3, 7}), "0,2-3,7");
}

// This machine: whatever it has (no GPU and 2 cores on a developer box), the
// groups must agree with it.
TEST(LiveTopologyTest, GroupsAgreeWithTheMachine) {
  const Topology topology = Topology::Live();
  const std::vector<int> cores = topology.PhysicalCores();
  ASSERT_FALSE(cores.empty());
  const std::vector<std::string> gpus = topology.GpuPciAddresses();
  std::printf("this machine: %zu GPUs, %zu physical cores (%s)\n", gpus.size(), cores.size(),
              FormatCoreList(cores).c_str());

  const std::vector<Group> groups = topology.BuildGroups(gpus, {}, {});
  EXPECT_EQ(groups.size(), gpus.empty() ? 1u : gpus.size());
  std::set<int> all_cores(cores.begin(), cores.end());
  for (const Group& group : groups) {
    EXPECT_EQ(group.cuda_device < 0, gpus.empty());
    for (int core : group.cores) EXPECT_EQ(all_cores.count(core), 1u) << core;
  }
  if (!gpus.empty()) ExpectDisjointCores(groups);
  std::ostringstream table;
  PrintGroups(table, groups, {});
  std::printf("%s", table.str().c_str());
}

TEST(LiveTopologyTest, TwoHostStandIns) {
  const Topology topology = Topology::Live();
  std::vector<NicDescription> nics;
  ProviderNics("shm", 4, &nics);
  const std::vector<Group> groups = topology.BuildGroups({}, nics, {2, 0, true});
  ASSERT_EQ(groups.size(), 2u);
  for (const Group& group : groups) EXPECT_FALSE(group.cores.empty());
  if (topology.PhysicalCores().size() >= 2) ExpectDisjointCores(groups);
  EXPECT_EQ(groups[0].nics, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(groups[1].nics, (std::vector<size_t>{2, 3}));
}

}  // namespace
}  // namespace tutorial
