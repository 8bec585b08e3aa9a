// What to tell a user when the machine, not the program, lacks something:
// libfabric without CUDA, a libcudart.so libfabric cannot load, the other
// host's EFA software, an instance launched with fewer EFA interfaces than
// it has NICs. Each names the missing piece (docs/troubleshooting.md).
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <string>

#include "common/network.h"

namespace tutorial {

// A p5.48xlarge has 32 EFA NICs, one per network card.
constexpr size_t kP5EfaNics = 32;

// Throws the UsageError for a provider that works with host memory but
// offers no FI_HMEM, naming why: this libfabric has no CUDA code, or it
// cannot load the unversioned libcudart.so it dlopens at start
// (src/hmem_cuda.c; our binaries link cudart statically and do not bring
// that file), or the provider itself refuses.
[[noreturn]] void ThrowNoGpuMemory(const std::string& provider);

// efa answers a WRITE with remote CQ data with -FI_EOPNOTSUPP when the two
// hosts differ on "unsolicited write recv" (efa_rdm_rma_post_write in
// prov/efa/src/rdm/efa_rdm_rma.c), which different EFA installer versions
// do. Returns `message` with what to do appended in that case.
std::string WithEfaWriteHint(std::string message, int error, bool is_write, const char* provider);

// The same for a failed operation of a Network.
std::string WithEfaHint(std::string message, const RdmaOp& op, const fi_info& info);

// The instance type on EC2 (the DMI product name, "p5.48xlarge"), or "".
std::string InstanceType(const char* path = "/sys/devices/virtual/dmi/id/product_name");

// True when an efa run on a p5 sees fewer NICs than a p5 has: the instance
// was launched with fewer EFA interfaces, and the run would quietly use
// fewer NICs.
bool P5LacksNics(const std::string& provider, size_t nics, const std::string& instance);

// Prints a warning line when P5LacksNics says so for this machine.
void WarnIfP5LacksNics(const std::string& provider, size_t nics);

}  // namespace tutorial
