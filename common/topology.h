// Which GPU, NICs and CPU cores belong together: one "group" per GPU.
//
// On a p5 every GPU shares a PCIe switch with 4 EFA NICs, and the physical
// cores of its NUMA node are split evenly among the GPUs of that node. On a
// machine without PCI NICs (shm, tcp) or without GPUs, the groups are
// synthesised so that the same chapter code runs everywhere.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace tutorial {

// A NIC as the provider reports it. `pci_address` is "dddd:bb:dd.f" (from
// fi_info's nic->bus_attr) or empty for providers without PCI devices.
struct NicDescription {
  std::string name;         // e.g. "rdmap79s0" or "shm:1"
  std::string pci_address;  // empty when the provider has none
  double link_gbps = 0;     // 0 when unknown
};

// One GPU (or host-memory stand-in) and what belongs to it.
struct Group {
  int cuda_device = -1;         // -1: host-memory stand-in
  std::string gpu_pci_address;  // empty for a stand-in
  int numa_node = -1;           // -1: unknown
  std::vector<int> cores;       // OS CPU indices, one hardware thread per physical core
  std::vector<size_t> nics;     // indices into the NicDescription list given to BuildGroups
};

struct TopologyRequest {
  size_t gpus = 0;           // 0: all that exist (host stand-ins: 1)
  size_t nics_per_gpu = 0;   // 0: all the group has (providers without PCI NICs: 2)
  bool host_memory = false;  // true: use host stand-ins even where GPUs exist
};

// A loaded hwloc topology (live machine, XML file or synthetic), RAII.
class Topology {
 public:
  // This machine, with its PCI devices. Throws RuntimeError if hwloc fails.
  static Topology Live();
  // A topology saved by `lstopo foo.xml` (or maint/make_topology_fixture.py).
  // Throws UsageError when the file cannot be loaded.
  static Topology FromXml(const std::string& path);
  // An hwloc synthetic description such as "pack:2 [numa] core:8 pu:2" (no
  // PCI devices): handy for tests of the core split. Throws UsageError.
  static Topology FromSynthetic(const std::string& description);

  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  // GPUs found in the topology (NVIDIA 3D/VGA controllers), in CUDA's
  // PCI-bus order, as PCI addresses.
  std::vector<std::string> GpuPciAddresses() const;

  // One hardware thread (the first) of every physical core, as OS CPU indices.
  std::vector<int> PhysicalCores() const;

  // Builds the groups. `gpu_pci_addresses` lists GPUs in CUDA device order
  // (empty: no GPUs, host stand-ins).
  //
  // NICs with a PCI address go to the GPU behind the same PCIe switch (the
  // deepest bridge shared with the NIC); a GPU left without one gets NICs of
  // its NUMA node. NICs without a PCI address (shm, tcp) are dealt out in
  // order, nics_per_gpu to each group. An empty `nics` gives groups without
  // NICs. Throws UsageError when the request asks for more GPUs or NICs than
  // exist, or a GPU ends up with no NIC.
  std::vector<Group> BuildGroups(const std::vector<std::string>& gpu_pci_addresses,
                                 const std::vector<NicDescription>& nics,
                                 const TopologyRequest& request) const;

 private:
  struct Impl;
  explicit Topology(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Prints the group table the way the server and client show it at start:
// GPU, PCI address, NUMA node, core range, NICs with their PCI addresses.
void PrintGroups(std::ostream& out, const std::vector<Group>& groups,
                 const std::vector<NicDescription>& nics);

// "0-11,48-59": OS CPU indices as ranges (in the order given).
std::string FormatCoreList(const std::vector<int>& cores);

}  // namespace tutorial
