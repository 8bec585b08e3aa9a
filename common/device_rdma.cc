// What efa does with the options below, read in libfabric's source
// (ofiwg/libfabric, v2.1.0 and v2.6.0):
// - prov/efa/src/rdm/efa_rdm_ep_fiops.c, efa_rdm_ep_setopt ->
//   efa_rdm_ep_set_fi_hmem_p2p_opt -> efa_hmem_validate_p2p_opt (efa_hmem.c):
//   FI_HMEM_P2P_REQUIRED is refused with -FI_EOPNOTSUPP when the device
//   cannot reach GPU memory peer to peer (p2p_supported_by_device: no
//   dma-buf, no nvidia-peermem) or P2P is disabled, and with -FI_EINVAL when
//   efa initialised no GPU interface at all. The default from API 1.18 is
//   FI_HMEM_P2P_PREFERRED: efa_rdm_ep_use_p2p (efa_rdm_ep.h) then answers 0
//   and every WRITE of GPU memory is staged through host bounce buffers,
//   silently. REQUIRED turns that into an error, here.
// - efa_rdm_ep_getopt: FI_OPT_EFA_EMULATED_WRITE is
//   !efa_rdm_ep_support_rdma_write, which needs use_device_rdma and the
//   device's RDMA-write capability; FI_OPT_EFA_EMULATED_READ is the same for
//   RDMA read. FI_OPT_EFA_USE_DEVICE_RDMA can only be set (getopt has no
//   case for it), and setting it would override the user's
//   FI_EFA_USE_DEVICE_RDMA; its default (efa_rdm_util.c,
//   efa_rdm_get_use_device_rdma) is the device's RDMA-read capability from
//   API 1.18, so "RDMA read not emulated" is how we read "device RDMA on".
#include "common/device_rdma.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>

#include <cstring>

#include "common/errors.h"

namespace tutorial {
namespace {

bool IsEfa(const fi_info& info) {
  return info.fabric_attr != nullptr && info.fabric_attr->prov_name != nullptr &&
         std::strcmp(info.fabric_attr->prov_name, "efa") == 0;
}

#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 18))
// 1 or 0 as the provider answers, -1 when it does not. Only the options of
// the 1.18 headers are read with it (ApplyEfaEndpointRules).
int GetBool(const EndpointOptions& options, int name) {
  bool value = false;
  size_t length = sizeof(value);
  if (!options.get || options.get(name, &value, &length) != 0 || length != sizeof(value)) return -1;
  return value ? 1 : 0;
}
#endif

}  // namespace

std::string DeviceRdma::Summary() const {
  if (!efa) return "";
  auto say = [](int v, const char* yes, const char* no) {
    return v < 0 ? std::string("unknown") : std::string(v ? yes : no);
  };
  std::string s = ", device RDMA " + say(device_rdma, "on", "off") + ", WRITEs " +
                  say(emulated_write, "emulated (sends the target copies)", "by the NIC");
  if (p2p_required) s += ", GPUDirect required";
  return s;
}

std::string MemoryLabel(const char* memory_kind, const DeviceRdma& rdma) {
  std::string kind = memory_kind;
  if (kind == "cuda" && rdma.efa && !rdma.WritesAreRdma()) return "cuda-emulated";
  return kind;
}

EndpointOptions OptionsOf(fid_ep* ep) {
  EndpointOptions options;
  options.set = [ep](int name, const void* value, size_t length) {
    return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, name, value, length);
  };
  options.get = [ep](int name, void* value, size_t* length) {
    return fi_getopt(&ep->fid, FI_OPT_ENDPOINT, name, value, length);
  };
  return options;
}

DeviceRdma ApplyEfaEndpointRules(const fi_info& info, const EndpointOptions& options) {
  DeviceRdma rdma;
  if (!IsEfa(info)) return rdma;
  rdma.efa = true;
  if (info.caps & FI_HMEM) {
    int required = FI_HMEM_P2P_REQUIRED;
    int ret = options.set(FI_OPT_FI_HMEM_P2P, &required, sizeof(required));
    if (ret != 0) {
      throw UsageError(
          std::string("--memory cuda over efa needs GPUDirect RDMA, which this host lacks: "
                      "fi_setopt(FI_OPT_FI_HMEM_P2P, FI_HMEM_P2P_REQUIRED) answered ") +
          fi_strerror(ret < 0 ? -ret : ret) +
          " (load the nvidia-peermem module or use a driver with dma-buf; "
          "docs/running-on-p5.md says how to check), or use --memory host");
    }
    rdma.p2p_required = true;
  }
  // FI_OPT_EFA_EMULATED_* came with the 1.18 headers (include/rdma/fi_ext.h);
  // they are enumerators, so only the headers' version can tell. (Built
  // against older headers we also ask for an older API, and efa refuses
  // FI_HMEM to it: see RequestedApiVersion.)
#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 18))
  int emulated_read = GetBool(options, FI_OPT_EFA_EMULATED_READ);
  rdma.device_rdma = emulated_read < 0 ? -1 : !emulated_read;
  rdma.emulated_write = GetBool(options, FI_OPT_EFA_EMULATED_WRITE);
#endif
  return rdma;
}

}  // namespace tutorial
