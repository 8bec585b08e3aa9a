#include "common/setup_hints.h"

#include <dlfcn.h>
#include <rdma/fi_errno.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "common/errors.h"

namespace tutorial {

void ThrowNoGpuMemory(const std::string& provider) {
  // A libfabric built without CUDA does not contain the name it would load.
  Dl_info where{};
  std::string library;
  if (dladdr(reinterpret_cast<void*>(&fi_getinfo), &where) != 0 && where.dli_fname != nullptr)
    library = where.dli_fname;
  if (!library.empty()) {
    std::ifstream file(library, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (!bytes.empty() && bytes.find("libcudart.so") == std::string::npos)
      throw UsageError(
          "this libfabric was built without CUDA support, so no provider takes CUDA "
          "memory; use --memory host, or a CUDA-enabled libfabric (the EFA "
          "installer's on a p5): " +
          library);
  }
  void* cudart = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
  if (cudart == nullptr)
    throw UsageError(
        "libfabric cannot load libcudart.so (it dlopens that unversioned name; "
        "without it CUDA support stays off and no provider offers FI_HMEM): put the "
        "CUDA toolkit's lib64 on LD_LIBRARY_PATH, e.g. export "
        "LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH, and run again "
        "(provider " +
        provider + ")");
  dlclose(cudart);
  throw UsageError("no FI_HMEM (CUDA memory) from provider " + provider +
                   " although libfabric loads libcudart.so; FI_LOG_LEVEL=info fi_info -p " +
                   provider + " -c FI_HMEM says why; or use --memory host");
}

std::string WithEfaWriteHint(std::string message, int error, bool is_write, const char* provider) {
  if (error != FI_EOPNOTSUPP || !is_write || provider == nullptr ||
      std::strstr(provider, "efa") == nullptr)
    return message;
  return message +
         " (efa refuses a WRITE with immediate data when the two hosts differ on unsolicited "
         "write recv: install the same EFA installer version on both, or set "
         "FI_EFA_USE_UNSOLICITED_WRITE_RECV=0 on both)";
}

std::string WithEfaHint(std::string message, const RdmaOp& op, const fi_info& info) {
  return WithEfaWriteHint(std::move(message), op.error, op.type == OpType::kWrite,
                          info.fabric_attr != nullptr ? info.fabric_attr->prov_name : nullptr);
}

std::string InstanceType(const char* path) {
  std::ifstream file(path);
  std::string name;
  std::getline(file, name);
  return name;
}

bool P5LacksNics(const std::string& provider, size_t nics, const std::string& instance) {
  return provider == "efa" && instance.rfind("p5.", 0) == 0 && nics < kP5EfaNics;
}

void WarnIfP5LacksNics(const std::string& provider, size_t nics) {
  if (!P5LacksNics(provider, nics, InstanceType())) return;
  std::fprintf(stderr,
               "warning: efa: fewer NICs than a p5 has (%zu of %zu): launch with all %zu EFA "
               "interfaces (network cards 0-%zu, interface type efa or efa-only); this run "
               "uses %zu\n",
               nics, kP5EfaNics, kP5EfaNics, kP5EfaNics - 1, nics);
}

}  // namespace tutorial
