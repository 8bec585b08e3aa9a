// Asks libfabric what tools/p5_check.py cannot see from outside: does a real
// endpoint of the efa fabric accept FI_OPT_FI_HMEM_P2P = FI_HMEM_P2P_REQUIRED,
// that is, can its NIC read and write GPU memory itself (GPUDirect RDMA)?
// The chapters set the same option on every efa endpoint with --memory cuda
// (common/device_rdma.cc); efa refuses it on a host without peer to peer
// (efa_rdm_ep_setopt, efa_hmem_validate_p2p_opt in libfabric's efa provider).
//
//   p5_probe gpudirect [--provider efa]
//
// Prints one line: "accepted on DOMAIN", "refused on DOMAIN: ..." or
// "no endpoint ...", and exits 0, 1 or 2 accordingly.
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "common/network.h"

namespace {

int ProbeGpuDirect(const std::string& provider) {
  using tutorial::FidPtr;
  tutorial::FiInfoPtr hints(fi_allocinfo());
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA | FI_HMEM | FI_REMOTE_COMM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_HMEM | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  if (provider == "efa") hints->fabric_attr->name = strdup("efa");
  fi_info* list = nullptr;
  int ret = fi_getinfo(tutorial::RequestedApiVersion(), nullptr, nullptr, 0, hints.get(), &list);
  tutorial::FiInfoPtr owned(list);
  if (ret != 0 || list == nullptr) {
    std::printf("no endpoint to ask: provider %s offers no RDM endpoint with FI_HMEM (%s)\n",
                provider.c_str(), fi_strerror(ret < 0 ? -ret : FI_ENODATA));
    return 2;
  }
  const char* domain_name = list->domain_attr->name ? list->domain_attr->name : "?";
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_ep* ep = nullptr;
  ret = fi_fabric(list->fabric_attr, &fabric, nullptr);
  FidPtr<fid_fabric> fabric_owner(fabric);
  if (ret == 0) ret = fi_domain(fabric, list, &domain, nullptr);
  FidPtr<fid_domain> domain_owner(domain);
  if (ret == 0) ret = fi_endpoint(domain, list, &ep, nullptr);
  FidPtr<fid_ep> ep_owner(ep);
  if (ret != 0) {
    std::printf("no endpoint to ask: opening one on %s failed (%s)\n", domain_name,
                fi_strerror(-ret));
    return 2;
  }
  int required = FI_HMEM_P2P_REQUIRED;
  ret = fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &required, sizeof(required));
  if (ret != 0) {
    std::printf("refused on %s: fi_setopt(FI_OPT_FI_HMEM_P2P, FI_HMEM_P2P_REQUIRED) = %d (%s)\n",
                domain_name, ret, fi_strerror(-ret));
    return 1;
  }
  std::printf("accepted on %s\n", domain_name);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string provider = "efa";
  if (argc >= 4 && std::string(argv[2]) == "--provider") provider = argv[3];
  if (argc < 2 || std::string(argv[1]) != "gpudirect" || argc == 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s gpudirect [--provider NAME]\n", argv[0]);
    return 64;
  }
  return ProbeGpuDirect(provider);
}
