// GPUDirect over efa, or a loud refusal: what an efa endpoint is
// asked before fi_enable, and what it says about its WRITEs. Apart from
// Network so that a test can play the provider: no machine here has EFA.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>

#include <functional>
#include <string>

namespace tutorial {

// What an efa endpoint does with our WRITEs. -1: not known (not efa, or
// headers older than 1.18, which lack the options).
struct DeviceRdma {
  bool efa = false;           // the endpoint is efa's, so the fields apply
  bool p2p_required = false;  // FI_HMEM_P2P_REQUIRED was set (GPU memory)
  int device_rdma = -1;       // 1: the NIC's RDMA is in use
  int emulated_write = -1;    // 1: WRITEs are sends the target copies

  // True when a WRITE is the NIC's own RDMA write. Only then is a number
  // measured with GPU memory a GPUDirect RDMA number.
  bool WritesAreRdma() const { return device_rdma == 1 && emulated_write == 0; }
  // ", device RDMA on, WRITEs by the NIC, GPUDirect required" for the
  // first line a program prints; "" when not efa.
  std::string Summary() const;
};

// The memory kind as results name it: "cuda" only for GPU memory written by
// the NIC's own RDMA; GPU memory over a path that emulates WRITEs is
// "cuda-emulated", never counted as a GPU number.
std::string MemoryLabel(const char* memory_kind, const DeviceRdma& rdma);

// fi_setopt / fi_getopt on one endpoint (FI_OPT_ENDPOINT level), as
// functions, so that a test can answer in the provider's place.
struct EndpointOptions {
  std::function<int(int name, const void* value, size_t length)> set;
  std::function<int(int name, void* value, size_t* length)> get;
};
EndpointOptions OptionsOf(fid_ep* ep);

// Call between fi_endpoint and fi_enable. For an efa endpoint opened with
// FI_HMEM (GPU memory), sets FI_OPT_FI_HMEM_P2P to FI_HMEM_P2P_REQUIRED, so
// that a host without GPUDirect (no nvidia-peermem, no dma-buf) is refused
// here, in one line (UsageError), instead of bouncing every WRITE through
// host memory without a word; then reads whether the NIC's RDMA is in use
// and whether WRITEs are emulated. Other providers: nothing is asked.
DeviceRdma ApplyEfaEndpointRules(const fi_info& info, const EndpointOptions& options);

}  // namespace tutorial
