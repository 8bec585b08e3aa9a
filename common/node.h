// This process's side of a transfer, the same for server and client: the
// groups (GPU, its NICs, its cores), one Network per NIC, and each GPU's
// buffers registered on every NIC of its group.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/network.h"
#include "common/options.h"
#include "common/topology.h"

namespace tutorial {

// How a chapter's NICs are made: the series' Network unless the chapter
// brings its own kind (chapters 17 and 18).
using MakeNetwork = std::function<std::unique_ptr<Network>(const fi_info& info)>;

// What a chapter changes in the library; empty: the series' choices.
struct NetworkSetup {
  EditHints edit_hints;      // chapter 16: the threading level
  MakeNetwork make_network;  // chapters 17, 18: a Network of their own kind
};

class Node {
 public:
  // Resolves "auto" choices, finds the NICs, builds the groups, opens the
  // networks and registers `buffers_per_gpu` buffers of `buffer_size` bytes
  // per GPU. Throws UsageError / RuntimeError with a one-line message.
  // `setup` is the chapter's (see NetworkSetup).
  Node(const CommonOptions& options, uint32_t buffers_per_gpu, uint64_t buffer_size,
       const NetworkSetup& setup = {});

  const FabricChoice& fabric() const { return fabric_; }
  size_t num_gpus() const { return groups_.size(); }
  size_t nics_per_gpu() const { return groups_.empty() ? 0 : groups_[0].nics.size(); }
  uint32_t buffers_per_gpu() const { return buffers_per_gpu_; }
  uint64_t buffer_size() const { return buffer_size_; }

  const std::vector<Group>& groups() const { return groups_; }
  std::vector<NetworkGroup>& net_groups() { return net_groups_; }
  Network& net(size_t gpu, size_t nic) { return *networks_[gpu * nics_per_gpu() + nic]; }
  Buffer& buffer(size_t gpu, size_t buf) { return buffers_[gpu * buffers_per_gpu_ + buf]; }
  // `buf` of `gpu` as registered on the group's NIC `nic`.
  const MemoryRegion& region(size_t gpu, size_t nic, size_t buf) const {
    return regions_[(gpu * nics_per_gpu() + nic) * buffers_per_gpu_ + buf];
  }

  // Closes the registrations on NIC `nic` of `gpu`, calls `reopen` (which
  // may give that NIC a new domain), and registers the buffers again.
  void RegisterAgain(size_t gpu, size_t nic, const std::function<void()>& reopen);

  // Summed link speed of the NICs in use, 0 when the provider reports none.
  double link_gbps() const;
  // "" for real NICs; for a simulated one (simnic) the model's one-line
  // summary, which every number it produces must carry.
  std::string simulated_model() const;

  // Provider, libfabric version, memory kind and the group table.
  void PrintSummary(std::ostream& out) const;

 private:
  FabricChoice fabric_;
  uint32_t buffers_per_gpu_;
  uint64_t buffer_size_;
  std::vector<FiInfoPtr> nic_infos_;
  std::vector<NicDescription> nic_descriptions_;
  std::vector<const fi_info*> nic_info_of_;  // per NicDescription
  std::vector<Group> groups_;
  std::vector<std::unique_ptr<Network>> networks_;    // gpu-major
  std::vector<std::unique_ptr<NetworkHooks>> hooks_;  // one per Network (harness/)
  std::vector<NetworkGroup> net_groups_;
  std::vector<Buffer> buffers_;        // gpu-major
  std::vector<MemoryRegion> regions_;  // (gpu, nic, buffer)
};

}  // namespace tutorial
