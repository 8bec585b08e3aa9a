#include "common/node.h"

#include <rdma/fabric.h>

#include <ostream>
#include <sstream>

#include "common/errors.h"
#include "common/result_json.h"
#include "harness/recovery_nic.h"
#include "simnic/provider_path.h"

namespace tutorial {
namespace {

MemoryKind ResolveMemory(const std::string& requested) {
  if (requested == "host") return MemoryKind::kHost;
  bool usable = CudaDeviceCount() > 0;
  if (requested == "cuda") {
    if (!BuiltWithCuda()) {
      throw UsageError(
          "--memory cuda: this binary was built without CUDA (set CUDA_HOME and rebuild)");
    }
    if (!usable) throw UsageError("--memory cuda: no usable CUDA device (driver or GPU missing)");
    return MemoryKind::kCuda;
  }
  return usable ? MemoryKind::kCuda : MemoryKind::kHost;
}

// "0000:4f:00.0" from a NIC's bus attributes; empty when it has none.
std::string PciAddressOf(const fi_info& info) {
  if (info.nic == nullptr || info.nic->bus_attr == nullptr ||
      info.nic->bus_attr->bus_type != FI_BUS_PCI) {
    return "";
  }
  const fi_pci_attr& pci = info.nic->bus_attr->attr.pci;
  char text[16];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", pci.domain_id, pci.bus_id, pci.device_id,
                pci.function_id);
  return text;
}

}  // namespace

Node::Node(const CommonOptions& options, uint32_t buffers_per_gpu, uint64_t buffer_size,
           const NetworkSetup& setup)
    : buffers_per_gpu_(buffers_per_gpu), buffer_size_(buffer_size) {
  // Before libfabric initialises: it reads FI_PROVIDER_PATH once.
  simnic::UseBuiltProviderIfUnset(options.provider);
  fabric_.provider = ResolveProvider(options.provider);
  fabric_.memory = ResolveMemory(options.memory);
  fabric_.domain = options.domain;
  // A workshop runs server and client on one machine: tcp over loopback
  // unless told otherwise.
  if (fabric_.domain.empty() && fabric_.provider == "tcp") fabric_.domain = "lo";

  nic_infos_ = FindNics(fabric_, setup.edit_hints);

  // EFA: every fi_info is a NIC with a PCI address. Other providers have no
  // PCI NICs: each group gets --nics-per-gpu endpoints, endpoint i on the
  // provider's domain i mod (number of domains) (shm and tcp: all on one;
  // simnic: one simulated NIC each).
  bool pci_nics = fabric_.provider == "efa";
  TopologyRequest request;
  request.gpus = options.gpus;
  request.nics_per_gpu = options.nics_per_gpu;
  request.host_memory = fabric_.memory == MemoryKind::kHost;
  if (pci_nics) {
    for (const auto& info : nic_infos_) {
      NicDescription nic;
      nic.name = info->domain_attr->name;
      nic.pci_address = PciAddressOf(*info);
      nic.link_gbps = info->nic && info->nic->link_attr
                          ? static_cast<double>(info->nic->link_attr->speed) / 1e9
                          : 0;
      nic_descriptions_.push_back(nic);
      nic_info_of_.push_back(info.get());
    }
  } else {
    size_t gpus = options.gpus;
    if (gpus == 0 || !options.cuda_devices.empty()) {
      gpus = fabric_.memory == MemoryKind::kCuda ? static_cast<size_t>(CudaDeviceCount()) : 1;
    }
    size_t per_gpu = options.nics_per_gpu == 0 ? 2 : options.nics_per_gpu;
    for (size_t i = 0; i < gpus * per_gpu; ++i) {
      NicDescription nic;
      const fi_info& info = *nic_infos_[i % nic_infos_.size()];
      nic.name = fabric_.provider + "/" + info.domain_attr->name + "#" + std::to_string(i);
      nic_descriptions_.push_back(nic);
      nic_info_of_.push_back(&info);
    }
    request.nics_per_gpu = per_gpu;
  }

  std::vector<std::string> gpu_pci;
  if (fabric_.memory == MemoryKind::kCuda) {
    for (int d = 0; d < CudaDeviceCount(); ++d) gpu_pci.push_back(CudaPciAddress(d));
  }
  // --cuda-devices: build the groups of all GPUs (cores are shared out per
  // NUMA node among all of them), then keep the listed ones in that order.
  const std::vector<int>& devices = options.cuda_devices;
  if (!devices.empty()) {
    if (fabric_.memory != MemoryKind::kCuda) throw UsageError("--cuda-devices needs --memory cuda");
    if (options.gpus != 0 && options.gpus != devices.size()) {
      throw UsageError("--gpus " + std::to_string(options.gpus) + " disagrees with the " +
                       std::to_string(devices.size()) + " device(s) of --cuda-devices");
    }
    request.gpus = 0;
  }
  Topology topology = Topology::Live();
  groups_ = topology.BuildGroups(gpu_pci, nic_descriptions_, request);
  if (!devices.empty()) {
    std::vector<Group> chosen;
    for (int device : devices) {
      if (device >= static_cast<int>(groups_.size())) {
        throw UsageError("--cuda-devices: no CUDA device " + std::to_string(device) +
                         " (this machine has " + std::to_string(groups_.size()) + ")");
      }
      for (const Group& g : chosen) {
        if (g.cuda_device == device)
          throw UsageError("--cuda-devices: device " + std::to_string(device) + " listed twice");
      }
      chosen.push_back(groups_[device]);
    }
    groups_ = std::move(chosen);
  }
  if (groups_.empty()) throw UsageError("no GPU groups to run with");

  size_t per_gpu = groups_[0].nics.size();
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].nics.size() != per_gpu) {
      throw UsageError("GPU groups have different numbers of NICs; pass --nics-per-gpu");
    }
    std::vector<Network*> group_nets;
    for (size_t nic : groups_[g].nics) {
      const fi_info& info = *nic_info_of_[nic];
      networks_.push_back(setup.make_network ? setup.make_network(info)
                                             : std::make_unique<Network>(info));
      hooks_.push_back(std::make_unique<NicHarness>(*networks_.back()));
      group_nets.push_back(networks_.back().get());
    }
    net_groups_.emplace_back(std::move(group_nets));
  }

  for (size_t g = 0; g < groups_.size(); ++g) {
    MemoryKind kind = groups_[g].cuda_device >= 0 ? fabric_.memory : MemoryKind::kHost;
    for (uint32_t b = 0; b < buffers_per_gpu_; ++b) {
      buffers_.push_back(Buffer::Allocate(kind, groups_[g].cuda_device, buffer_size_));
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t n = 0; n < per_gpu; ++n) {
      for (uint32_t b = 0; b < buffers_per_gpu_; ++b) {
        regions_.push_back(net(g, n).Register(buffer(g, b)));
      }
    }
  }
}

void Node::RegisterAgain(size_t gpu, size_t nic, const std::function<void()>& reopen) {
  const size_t first = (gpu * nics_per_gpu() + nic) * buffers_per_gpu_;
  for (uint32_t b = 0; b < buffers_per_gpu_; ++b) regions_[first + b] = MemoryRegion();
  reopen();
  for (uint32_t b = 0; b < buffers_per_gpu_; ++b) {
    regions_[first + b] = net(gpu, nic).Register(buffer(gpu, b));
  }
}

double Node::link_gbps() const {
  double total = 0;
  for (const auto& net : networks_) total += LinkGbps(net->info());
  return total;
}

std::string Node::simulated_model() const {
  const fi_info& info = *nic_infos_[0];
  if (info.nic == nullptr || info.nic->device_attr == nullptr) return "";
  const fi_device_attr& device = *info.nic->device_attr;
  if (device.driver == nullptr || std::string(device.driver).find("simulated") == std::string::npos)
    return "";
  return device.firmware != nullptr ? device.firmware : "simulated NIC";
}

void Node::PrintSummary(std::ostream& out) const {
  uint32_t api = RequestedApiVersion();
  const fi_info& info = *nic_infos_[0];
  out << "libfabric " << LibfabricVersion() << " (API " << FI_MAJOR(api) << "." << FI_MINOR(api)
      << ") from " << LibfabricPath() << ", provider " << info.fabric_attr->prov_name << ", fabric "
      << (info.fabric_attr->name ? info.fabric_attr->name : "?") << ", threading "
      << (info.domain_attr->threading == FI_THREAD_SAFE     ? "FI_THREAD_SAFE"
          : info.domain_attr->threading == FI_THREAD_DOMAIN ? "FI_THREAD_DOMAIN"
                                                            : "other")
      << ", memory " << MemoryKindName(fabric_.memory) << ", " << groups_.size() << " group(s) x "
      << nics_per_gpu() << " NIC(s), " << buffers_per_gpu_ << " buffer(s) of " << buffer_size_
      << " bytes per group" << DeviceRdmaOf(*networks_[0]).Summary() << "\n";
  std::string model = simulated_model();
  if (!model.empty()) out << "SIMULATED NICs, every number below is simulated: " << model << "\n";
  PrintGroups(out, groups_, nic_descriptions_);
}

}  // namespace tutorial
