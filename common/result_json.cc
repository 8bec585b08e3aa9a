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
  int unused = 0;  // fi_tostr wants a pointer even for FI_TYPE_VERSION
  const char* text = fi_tostr(&unused, FI_TYPE_VERSION);
  if (text != nullptr && *text != '\0') return text;
  uint32_t v = fi_version();
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

std::string LibfabricPath() {
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(&fi_getinfo), &where) == 0 || where.dli_fname == nullptr)
    return "unknown";
  return where.dli_fname;
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

}  // namespace tutorial
