// Prints the GPU/NIC/core groups that common/topology builds for a saved
// topology and a list of NICs, as one JSON object: the facts behind
// docs/figures/p5_layout.svg (maint/make_figures.py), from the same code
// the chapters run, without the machine.
//
//   topology_dump tests/fixtures/p5.48xlarge.xml rdmap79s0=0000:4f:00.0 ...
//
// Each NIC is NAME=PCI_ADDRESS (as fi_info's nic->bus_attr gives it).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/options.h"
#include "common/topology.h"

namespace {

void PrintStrings(const std::vector<std::string>& values) {
  std::printf("[");
  for (size_t i = 0; i < values.size(); ++i) std::printf("%s\"%s\"", i ? ", " : "", values[i].c_str());
  std::printf("]");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: %s TOPOLOGY.xml [NAME=PCI_ADDRESS ...]\n", argv[0]);
    return argc < 2 ? 2 : 0;
  }
  try {
    tutorial::Topology topology = tutorial::Topology::FromXml(argv[1]);
    std::vector<tutorial::NicDescription> nics;
    for (int i = 2; i < argc; ++i) {
      std::string arg = argv[i];
      size_t eq = arg.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "topology_dump: %s: expected NAME=PCI_ADDRESS\n", argv[i]);
        return 2;
      }
      nics.push_back({arg.substr(0, eq), arg.substr(eq + 1), 100});
    }
    std::vector<std::string> gpus = topology.GpuPciAddresses();
    std::vector<tutorial::Group> groups = topology.BuildGroups(gpus, nics, {});
    std::printf("{\"buffers_per_gpu\": %u, \"physical_cores\": %zu, \"groups\": [",
                tutorial::kBuffersPerGpu, topology.PhysicalCores().size());
    for (size_t g = 0; g < groups.size(); ++g) {
      const tutorial::Group& group = groups[g];
      std::printf("%s\n {\"cuda_device\": %d, \"gpu_pci\": \"%s\", \"numa_node\": %d, \"cores\": [",
                  g ? "," : "", group.cuda_device, group.gpu_pci_address.c_str(), group.numa_node);
      for (size_t c = 0; c < group.cores.size(); ++c) std::printf("%s%d", c ? ", " : "", group.cores[c]);
      std::vector<std::string> names, addresses;
      for (size_t index : group.nics) {
        names.push_back(nics.at(index).name);
        addresses.push_back(nics.at(index).pci_address);
      }
      std::printf("], \"nics\": ");
      PrintStrings(names);
      std::printf(", \"nic_pci\": ");
      PrintStrings(addresses);
      std::printf("}");
    }
    std::printf("\n]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "topology_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
