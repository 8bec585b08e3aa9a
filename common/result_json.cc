#include "common/result_json.h"

#include <dlfcn.h>
#include <rdma/fabric.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>

#include "common/errors.h"

namespace tutorial {

std::string LibfabricVersion() {
  // Once, into a buffer of our own: fi_tostr's static buffer is shared by
  // every thread.
  static const std::string version = [] {
    char text[64] = {};
    int unused = 0;  // fi_tostr_r wants a pointer even for FI_TYPE_VERSION
    if (fi_tostr_r(text, sizeof(text), &unused, FI_TYPE_VERSION) != nullptr && text[0] != '\0')
      return std::string(text);
    uint32_t v = fi_version();
    return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
  }();
  return version;
}

std::string LibfabricPath() {
  static const std::string path = [] {
    Dl_info where{};
    if (dladdr(reinterpret_cast<void*>(&fi_getinfo), &where) == 0 || where.dli_fname == nullptr)
      return std::string("unknown");
    return std::string(where.dli_fname);
  }();
  return path;
}

nlohmann::json ResultRecord(const std::string& chapter, const std::string& role) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  uint32_t v = fi_version();
  nlohmann::json record;
  record["chapter"] = chapter;
  record["role"] = role;
  record["host"] = host;
  record["time"] = when;
  record["libfabric"] = std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
  record["libfabric_version"] = LibfabricVersion();
  record["libfabric_path"] = LibfabricPath();
  return record;
}

void AppendResult(const std::string& path, const nlohmann::json& record) {
  std::ofstream out(path, std::ios::app);
  out << record.dump() << "\n";
  if (!out) throw RuntimeError("cannot append to --result-json file " + path);
}

void AddMemoryFields(nlohmann::json& record, const char* memory_kind, const DeviceRdma& rdma) {
  auto known = [](int value) { return value < 0 ? nlohmann::json() : nlohmann::json(value > 0); };
  record["memory"] = MemoryLabel(memory_kind, rdma);
  record["device_rdma"] = known(rdma.device_rdma);
  record["emulated_write"] = known(rdma.emulated_write);
}

}  // namespace tutorial
