// Groups of GPU, NICs and cores, found with hwloc (see topology.h).
#include "common/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iomanip>
#include <optional>
#include <ostream>
#include <set>
#include <tuple>
#include <utility>

#include "common/errors.h"

// hwloc 2.0 brought the I/O type filters used below. hwloc 3.0 changed the
// OS-device types; this file never looks at OS devices (GPUs and NICs are
// matched by PCI address), so it builds against 2.x and 3.x alike.
#if HWLOC_API_VERSION < 0x00020000
#error "common/topology.cc needs hwloc 2.0 or newer"
#endif

namespace tutorial {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* topology) const { hwloc_topology_destroy(topology); }
};
using TopologyHandle = std::unique_ptr<hwloc_topology, TopologyDeleter>;

constexpr unsigned kNvidiaVendorId = 0x10de;
constexpr unsigned kVgaControllerClass = 0x0300;
constexpr unsigned k3dControllerClass = 0x0302;  // H100 and other compute GPUs

// Providers without PCI devices get this many "NICs" (endpoints) per group.
constexpr size_t kDefaultProviderNicsPerGroup = 2;

struct PciAddress {
  unsigned domain = 0, bus = 0, device = 0, function = 0;

  // "dddd:bb:dd.f" (CUDA writes the domain with 8 digits) or "bb:dd.f".
  static std::optional<PciAddress> Parse(const std::string& text) {
    PciAddress a;
    int consumed = 0;
    if (std::sscanf(text.c_str(), "%x:%x:%x.%x%n", &a.domain, &a.bus, &a.device, &a.function,
                    &consumed) == 4 &&
        consumed == static_cast<int>(text.size())) {
      return a;
    }
    a.domain = 0;
    if (std::sscanf(text.c_str(), "%x:%x.%x%n", &a.bus, &a.device, &a.function, &consumed) == 3 &&
        consumed == static_cast<int>(text.size())) {
      return a;
    }
    return std::nullopt;
  }

  static PciAddress Of(hwloc_obj_t pci_device) {
    const auto& pci = pci_device->attr->pcidev;
    return {static_cast<unsigned>(pci.domain), pci.bus, pci.dev, pci.func};
  }

  std::string ToString() const {
    char text[32];
    std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", domain, bus, device, function);
    return text;
  }

  bool operator<(const PciAddress& other) const {
    return std::tie(domain, bus, device, function) <
           std::tie(other.domain, other.bus, other.device, other.function);
  }
};

hwloc_obj_t FindPciDevice(hwloc_topology_t topology, const PciAddress& address) {
  return hwloc_get_pcidev_by_busid(topology, address.domain, address.bus, address.device,
                                   address.function);
}

bool IsNvidiaGpu(hwloc_obj_t pci_device) {
  const auto& pci = pci_device->attr->pcidev;
  // NVSwitches are NVIDIA devices too, but of class 0x0680 (bridge, other).
  return pci.vendor_id == kNvidiaVendorId &&
         (pci.class_id == kVgaControllerClass || pci.class_id == k3dControllerClass);
}

// Where a PCI device lives: its NUMA node and that node's CPUs. A device
// attached above several NUMA nodes gets numa_node -1 and the CPUs it is
// attached to.
struct Locality {
  int numa_node = -1;
  hwloc_const_cpuset_t cpus = nullptr;  // owned by the topology
};

Locality LocalityOf(hwloc_topology_t topology, hwloc_obj_t pci_device) {
  hwloc_obj_t attached_to = hwloc_get_non_io_ancestor_obj(topology, pci_device);
  if (hwloc_bitmap_weight(attached_to->nodeset) == 1) {
    hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(
        topology, static_cast<unsigned>(hwloc_bitmap_first(attached_to->nodeset)));
    if (node != nullptr) return {static_cast<int>(node->os_index), node->cpuset};
  }
  return {-1, attached_to->cpuset};
}

// The first hardware thread of every physical core within `cpus`: the
// second thread of a core shares its execution units, so a busy-polling
// thread there would only slow down the first.
std::vector<int> PhysicalCoresIn(hwloc_topology_t topology, hwloc_const_cpuset_t local_cpus) {
  // On this machine, only the CPUs the process may run on (taskset, a
  // cgroup): a thread pinned outside them would escape the user's limit.
  // (Topologies read from files describe another machine: all their CPUs.)
  hwloc_const_cpuset_t cpus = local_cpus;
  hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
  if (allowed != nullptr && hwloc_topology_is_thissystem(topology) &&
      hwloc_get_cpubind(topology, allowed, HWLOC_CPUBIND_PROCESS) == 0 &&
      hwloc_bitmap_intersects(allowed, local_cpus)) {
    hwloc_bitmap_and(allowed, allowed, local_cpus);
    cpus = allowed;
  }
  std::vector<int> cores;
  for (hwloc_obj_t core = nullptr;
       (core = hwloc_get_next_obj_inside_cpuset_by_type(topology, cpus, HWLOC_OBJ_CORE, core));) {
    cores.push_back(hwloc_bitmap_first(core->cpuset));  // PUs are numbered by OS index
  }
  if (cores.empty()) {  // no core information: every PU counts as a core
    for (hwloc_obj_t pu = nullptr;
         (pu = hwloc_get_next_obj_inside_cpuset_by_type(topology, cpus, HWLOC_OBJ_PU, pu));) {
      cores.push_back(static_cast<int>(pu->os_index));
    }
  }
  hwloc_bitmap_free(allowed);
  return cores;
}

// Part `part` of `parts` contiguous, near-equal slices of `items`. With fewer
// items than parts, parts share them: part p gets item p % size.
template <typename T>
std::vector<T> Slice(const std::vector<T>& items, size_t parts, size_t part) {
  if (items.empty()) return {};
  if (items.size() < parts) return {items[part % items.size()]};
  const size_t begin = part * items.size() / parts;
  const size_t end = (part + 1) * items.size() / parts;
  return std::vector<T>(items.begin() + begin, items.begin() + end);
}

// Depth of the deepest PCI bridge above both objects (0: only the host bridge
// is shared, 2 on a p5: the PCIe switch), or -1 when they share no bridge.
int SharedBridgeDepth(hwloc_obj_t a, hwloc_obj_t b) {
  std::set<hwloc_obj_t> above_a;
  for (hwloc_obj_t up = a->parent; up != nullptr; up = up->parent) above_a.insert(up);
  for (hwloc_obj_t up = b->parent; up != nullptr; up = up->parent) {
    if (above_a.count(up) == 0) continue;
    if (up->type != HWLOC_OBJ_BRIDGE) return -1;  // met above the PCI tree
    int depth = 0;
    for (hwloc_obj_t above = up->parent; above && above->type == HWLOC_OBJ_BRIDGE;
         above = above->parent) {
      ++depth;
    }
    return depth;
  }
  return -1;
}

// A group under construction, with what hwloc knows about its place.
struct Placement {
  Group group;
  hwloc_obj_t gpu = nullptr;                  // the GPU's PCI device; null for a stand-in
  hwloc_const_cpuset_t local_cpus = nullptr;  // its NUMA node's CPUs
};

std::string Describe(const Group& group) {
  if (group.cuda_device < 0) return "host stand-in";
  return "GPU " + std::to_string(group.cuda_device) + " (" + group.gpu_pci_address + ")";
}

// Placements that share local CPUs (GPUs of one NUMA node) split its physical
// cores into contiguous chunks, in order.
void SplitCores(hwloc_topology_t topology, std::vector<Placement>& placements) {
  for (size_t i = 0; i < placements.size(); ++i) {
    size_t rank = 0, sharing = 0;
    for (size_t j = 0; j < placements.size(); ++j) {
      if (hwloc_bitmap_isequal(placements[j].local_cpus, placements[i].local_cpus)) {
        if (j < i) ++rank;
        ++sharing;
      }
    }
    placements[i].group.cores =
        Slice(PhysicalCoresIn(topology, placements[i].local_cpus), sharing, rank);
  }
}

std::vector<Placement> PlaceGpus(hwloc_topology_t topology,
                                 const std::vector<std::string>& gpu_pci_addresses) {
  std::vector<Placement> placements;
  for (size_t i = 0; i < gpu_pci_addresses.size(); ++i) {
    const std::string which = "CUDA device " + std::to_string(i);
    const std::optional<PciAddress> address = PciAddress::Parse(gpu_pci_addresses[i]);
    if (!address) {
      throw UsageError("bad PCI address '" + gpu_pci_addresses[i] + "' for " + which);
    }
    Placement placement;
    placement.gpu = FindPciDevice(topology, *address);
    if (placement.gpu == nullptr) {
      throw UsageError(which + " (" + address->ToString() +
                       ") is not among the PCI devices of the topology");
    }
    const Locality locality = LocalityOf(topology, placement.gpu);
    placement.group.cuda_device = static_cast<int>(i);
    placement.group.gpu_pci_address = address->ToString();
    placement.group.numa_node = locality.numa_node;
    placement.local_cpus = locality.cpus;
    placements.push_back(placement);
  }
  SplitCores(topology, placements);
  return placements;
}

// Host-memory stand-ins spread evenly over the NUMA nodes that have CPUs
// (stand-in i on node i*nodes/count); those on one node split its cores.
std::vector<Placement> PlaceStandIns(hwloc_topology_t topology, size_t count) {
  std::vector<hwloc_obj_t> nodes;
  for (hwloc_obj_t node = nullptr;
       (node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, node));) {
    // Memory-only nodes (CXL, HBM) have no CPUs; nodes with the same CPUs as
    // an earlier one (KNL's MCDRAM) add none.
    const bool has_new_cpus = !hwloc_bitmap_iszero(node->cpuset) &&
                              std::none_of(nodes.begin(), nodes.end(), [&](hwloc_obj_t seen) {
                                return hwloc_bitmap_isequal(seen->cpuset, node->cpuset);
                              });
    if (has_new_cpus) nodes.push_back(node);
  }
  std::vector<Placement> placements(count);
  for (size_t i = 0; i < count; ++i) {
    if (nodes.empty()) {
      placements[i].local_cpus = hwloc_topology_get_topology_cpuset(topology);
    } else {
      hwloc_obj_t node = nodes[i * nodes.size() / count];
      placements[i].group.numa_node = static_cast<int>(node->os_index);
      placements[i].local_cpus = node->cpuset;
    }
  }
  SplitCores(topology, placements);
  return placements;
}

// Gives NICs with PCI addresses to the placements; see topology.h. A GPU that
// gets none keeps an empty list (BuildGroups complains if it is kept).
void AssignPciNics(hwloc_topology_t topology, const std::vector<NicDescription>& nics,
                   std::vector<Placement>& placements) {
  struct PciNic {
    PciAddress address;
    size_t index;  // into `nics`
    hwloc_obj_t device;
  };
  std::vector<PciNic> known;
  for (size_t i = 0; i < nics.size(); ++i) {
    const std::optional<PciAddress> address = PciAddress::Parse(nics[i].pci_address);
    if (!address) {
      throw UsageError("bad PCI address '" + nics[i].pci_address + "' for NIC " + nics[i].name);
    }
    hwloc_obj_t device = FindPciDevice(topology, *address);
    if (device != nullptr) known.push_back({*address, i, device});
  }
  if (known.empty()) {
    throw UsageError("none of the " + std::to_string(nics.size()) +
                     " NICs is among the PCI devices of the topology");
  }
  // In PCI order, so that every group's list comes out in PCI order too.
  std::sort(known.begin(), known.end(),
            [](const PciNic& a, const PciNic& b) { return a.address < b.address; });

  // 1. Each NIC goes to the GPU it shares the deepest bridge with: on a p5,
  // the PCIe switch that holds one GPU and four EFA NICs. When several GPUs
  // are equally near (one switch, two GPUs), the one with fewer NICs so far
  // gets it, so that they share evenly. A NIC on no GPU's host bridge is left.
  for (const PciNic& nic : known) {
    Placement* nearest = nullptr;
    int nearest_depth = -1;
    for (Placement& placement : placements) {
      if (placement.gpu == nullptr) continue;
      const int depth = SharedBridgeDepth(placement.gpu, nic.device);
      if (depth < 0) continue;
      if (depth > nearest_depth ||
          (depth == nearest_depth && placement.group.nics.size() < nearest->group.nics.size())) {
        nearest = &placement;
        nearest_depth = depth;
      }
    }
    if (nearest != nullptr) nearest->group.nics.push_back(nic.index);
  }

  // 2. Placements still without NICs (stand-ins, GPUs with no NIC nearby)
  // split the NICs of their NUMA node. Stand-ins, whose memory any NIC can
  // reach, take from all NICs when their node has none.
  std::vector<Placement*> without_nics;
  for (Placement& placement : placements) {
    if (placement.group.nics.empty()) without_nics.push_back(&placement);
  }
  for (Placement* placement : without_nics) {
    std::vector<size_t> pool;
    for (const PciNic& nic : known) {
      if (hwloc_bitmap_isequal(LocalityOf(topology, nic.device).cpus, placement->local_cpus)) {
        pool.push_back(nic.index);
      }
    }
    if (pool.empty() && placement->gpu == nullptr) {
      for (const PciNic& nic : known) pool.push_back(nic.index);
    }
    size_t rank = 0, sharing = 0;
    for (const Placement* other : without_nics) {
      if (hwloc_bitmap_isequal(other->local_cpus, placement->local_cpus)) {
        if (other < placement) ++rank;
        ++sharing;
      }
    }
    placement->group.nics = Slice(pool, sharing, rank);
  }
}

enum class NicKind { kNone, kPci, kProvider };

NicKind ClassifyNics(const std::vector<NicDescription>& nics) {
  const auto with_address = std::count_if(
      nics.begin(), nics.end(), [](const NicDescription& nic) { return !nic.pci_address.empty(); });
  if (nics.empty()) return NicKind::kNone;
  if (with_address == 0) return NicKind::kProvider;
  if (static_cast<size_t>(with_address) == nics.size()) return NicKind::kPci;
  throw UsageError("some NICs have a PCI address and some have none: use NICs of one provider");
}

TopologyHandle LoadTopology(const char* xml_path, const char* synthetic) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw RuntimeError("hwloc_topology_init failed");
  TopologyHandle topology(raw);
  // hwloc leaves I/O out unless asked. Keep every PCI device and bridge (the
  // bridges are how we see which GPU and NIC share a PCIe switch), but no OS
  // devices: they are not needed, and finding them can start CUDA or NVML.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE);
#if HWLOC_API_VERSION >= 0x00020100
  // On Linux, hwloc reads the PCI devices from sysfs itself; its optional
  // libpciaccess plugin finds the same ones and leaks memory doing so
  // (LeakSanitizer reports it), so leave that plugin out.
  hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
#endif
  int status = 0;
  if (xml_path != nullptr) status = hwloc_topology_set_xml(raw, xml_path);
  if (synthetic != nullptr) status = hwloc_topology_set_synthetic(raw, synthetic);
  if (status == 0) status = hwloc_topology_load(raw);
  if (status != 0) {
    if (xml_path != nullptr)
      throw UsageError(std::string("cannot load hwloc XML topology ") + xml_path);
    if (synthetic != nullptr)
      throw UsageError(std::string("bad synthetic topology '") + synthetic + "'");
    throw RuntimeError("hwloc cannot load this machine's topology");
  }
  return topology;
}

}  // namespace

struct Topology::Impl {
  TopologyHandle topology;
};

Topology::Topology(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

Topology Topology::Live() {
  return Topology(std::make_unique<Impl>(Impl{LoadTopology(nullptr, nullptr)}));
}

Topology Topology::FromXml(const std::string& path) {
  return Topology(std::make_unique<Impl>(Impl{LoadTopology(path.c_str(), nullptr)}));
}

Topology Topology::FromSynthetic(const std::string& description) {
  return Topology(std::make_unique<Impl>(Impl{LoadTopology(nullptr, description.c_str())}));
}

std::vector<std::string> Topology::GpuPciAddresses() const {
  std::vector<PciAddress> gpus;
  for (hwloc_obj_t device = nullptr;
       (device = hwloc_get_next_pcidev(impl_->topology.get(), device));) {
    if (IsNvidiaGpu(device)) gpus.push_back(PciAddress::Of(device));
  }
  std::sort(gpus.begin(), gpus.end());
  std::vector<std::string> addresses;
  for (const PciAddress& gpu : gpus) addresses.push_back(gpu.ToString());
  return addresses;
}

std::vector<int> Topology::PhysicalCores() const {
  hwloc_topology_t topology = impl_->topology.get();
  return PhysicalCoresIn(topology, hwloc_topology_get_topology_cpuset(topology));
}

std::vector<Group> Topology::BuildGroups(const std::vector<std::string>& gpu_pci_addresses,
                                         const std::vector<NicDescription>& nics,
                                         const TopologyRequest& request) const {
  hwloc_topology_t topology = impl_->topology.get();
  const NicKind nic_kind = ClassifyNics(nics);
  const bool stand_ins = request.host_memory || gpu_pci_addresses.empty();

  // Cores (and NICs) are shared out among all GPUs, as on the real machine,
  // and only then are the groups trimmed to the request.
  std::vector<Placement> placements;
  size_t group_count = 0;
  if (stand_ins) {
    group_count = request.gpus > 0 ? request.gpus : 1;
    placements = PlaceStandIns(topology, group_count);
  } else {
    placements = PlaceGpus(topology, gpu_pci_addresses);
    group_count = request.gpus > 0 ? request.gpus : placements.size();
    if (group_count > placements.size()) {
      throw UsageError("asked for " + std::to_string(group_count) + " GPUs but this machine has " +
                       std::to_string(placements.size()));
    }
  }
  if (nic_kind == NicKind::kPci) AssignPciNics(topology, nics, placements);
  placements.resize(group_count);

  std::vector<Group> groups;
  for (Placement& placement : placements) groups.push_back(std::move(placement.group));

  switch (nic_kind) {
    case NicKind::kNone:
      if (request.nics_per_gpu > 0) {
        throw UsageError("asked for " + std::to_string(request.nics_per_gpu) +
                         " NICs per GPU but no NIC was given");
      }
      break;
    case NicKind::kPci:
      for (Group& group : groups) {
        if (group.nics.empty()) {
          throw UsageError(Describe(group) +
                           " has no NIC behind its PCIe switch or on its NUMA node");
        }
        if (request.nics_per_gpu > group.nics.size()) {
          throw UsageError("asked for " + std::to_string(request.nics_per_gpu) +
                           " NICs per GPU but " + Describe(group) + " has " +
                           std::to_string(group.nics.size()));
        }
        if (request.nics_per_gpu > 0) group.nics.resize(request.nics_per_gpu);
      }
      break;
    case NicKind::kProvider: {
      // No PCI devices: every group gets the next nics_per_gpu endpoints.
      const size_t per_group =
          request.nics_per_gpu > 0 ? request.nics_per_gpu : kDefaultProviderNicsPerGroup;
      const size_t needed = per_group * groups.size();
      if (nics.size() < needed) {
        throw UsageError("need " + std::to_string(needed) + " NICs (" +
                         std::to_string(groups.size()) + " groups x " + std::to_string(per_group) +
                         ") but only " + std::to_string(nics.size()) + " were given");
      }
      for (size_t g = 0; g < groups.size(); ++g) {
        for (size_t k = 0; k < per_group; ++k) groups[g].nics.push_back(g * per_group + k);
      }
      break;
    }
  }
  return groups;
}

std::string FormatCoreList(const std::vector<int>& cores) {
  std::string text;
  for (size_t begin = 0; begin < cores.size();) {
    size_t end = begin + 1;  // one past the run of consecutive numbers
    while (end < cores.size() && cores[end] == cores[end - 1] + 1) ++end;
    if (!text.empty()) text += ",";
    text += std::to_string(cores[begin]);
    if (end - begin > 1) text += "-" + std::to_string(cores[end - 1]);
    begin = end;
  }
  return text;
}

void PrintGroups(std::ostream& out, const std::vector<Group>& groups,
                 const std::vector<NicDescription>& nics) {
  std::vector<std::array<std::string, 5>> rows = {{"GPU", "PCI", "NUMA", "cores", "NICs"}};
  for (const Group& group : groups) {
    std::string nic_list;
    for (size_t index : group.nics) {
      const NicDescription& nic = nics.at(index);
      if (!nic_list.empty()) nic_list += ", ";
      nic_list += nic.name;
      if (!nic.pci_address.empty()) nic_list += " (" + nic.pci_address + ")";
    }
    const bool stand_in = group.cuda_device < 0;
    rows.push_back({stand_in ? "host" : std::to_string(group.cuda_device),
                    stand_in ? "-" : group.gpu_pci_address,
                    group.numa_node < 0 ? "-" : std::to_string(group.numa_node),
                    group.cores.empty() ? "-" : FormatCoreList(group.cores),
                    nic_list.empty() ? "-" : nic_list});
  }
  std::array<size_t, 4> widths{};
  for (const auto& row : rows) {
    for (size_t column = 0; column < widths.size(); ++column) {
      widths[column] = std::max(widths[column], row[column].size());
    }
  }
  for (const auto& row : rows) {
    for (size_t column = 0; column < widths.size(); ++column) {
      out << std::left << std::setw(static_cast<int>(widths[column] + 2)) << row[column];
    }
    out << row[4] << "\n";
  }
}

}  // namespace tutorial
