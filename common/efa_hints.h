// What to tell a user when efa refuses or lacks something for a reason
// outside the program: the other host's EFA software, an instance launched
// with fewer EFA interfaces than it has NICs.
#pragma once

#include <rdma/fi_errno.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <string>

namespace tutorial {

// A p5.48xlarge has 32 EFA NICs, one per network card.
constexpr size_t kP5EfaNics = 32;

// efa answers a WRITE with remote CQ data with -FI_EOPNOTSUPP when the two
// hosts differ on "unsolicited write recv" (efa_rdm_rma_post_write in
// prov/efa/src/rdm/efa_rdm_rma.c), which different EFA installer versions
// do. Returns `message` with what to do appended in that case.
inline std::string WithEfaWriteHint(std::string message, int error, bool is_write,
                                    const char* provider) {
  if (error != FI_EOPNOTSUPP || !is_write || provider == nullptr ||
      std::strstr(provider, "efa") == nullptr)
    return message;
  return message +
         " (efa refuses a WRITE with immediate data when the two hosts differ on unsolicited "
         "write recv: install the same EFA installer version on both, or set "
         "FI_EFA_USE_UNSOLICITED_WRITE_RECV=0 on both)";
}

// The instance type on EC2 (the DMI product name, "p5.48xlarge"), or "".
inline std::string InstanceType(const char* path = "/sys/devices/virtual/dmi/id/product_name") {
  std::ifstream file(path);
  std::string name;
  std::getline(file, name);
  return name;
}

// True when an efa run on a p5 sees fewer NICs than a p5 has: the instance
// was launched with fewer EFA interfaces, and the run would quietly use
// fewer NICs.
inline bool P5LacksNics(const std::string& provider, size_t nics, const std::string& instance) {
  return provider == "efa" && instance.rfind("p5.", 0) == 0 && nics < kP5EfaNics;
}

}  // namespace tutorial
