#include "common/result_json.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <rdma/fabric.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

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

namespace {

// Writes all of `text` to `fd`; false with errno set on failure.
bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string Why(int error) {
  return error == ELOOP ? "it is a symbolic link" : std::strerror(error);
}

}  // namespace

void AppendResult(const std::string& path, const nlohmann::json& record) {
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError("cannot append to --result-json file " + path + ": " + Why(errno));
  // One write: appends of other processes do not interleave with the line.
  bool written = WriteAll(fd, record.dump() + "\n");
  int error = errno;
  close(fd);
  if (!written)
    throw RuntimeError("cannot append to --result-json file " + path + ": " + Why(error));
}

void WriteFileAtomically(const std::string& path, const std::string& text) {
  size_t slash = path.rfind('/');
  std::string folder = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string pattern = folder + "." + name + ".XXXXXX";
  std::vector<char> temporary(pattern.begin(), pattern.end());
  temporary.push_back('\0');
  int fd = mkstemp(temporary.data());  // O_EXCL: never an existing file or link
  if (fd < 0) throw RuntimeError("cannot write " + path + ": " + std::strerror(errno));
  bool written = fchmod(fd, 0644) == 0 && WriteAll(fd, text);
  int error = errno;
  if (close(fd) != 0 && written) {
    written = false;
    error = errno;
  }
  if (written && std::rename(temporary.data(), path.c_str()) != 0) {
    written = false;
    error = errno;
  }
  if (!written) {
    unlink(temporary.data());
    throw RuntimeError("cannot write " + path + ": " + std::strerror(error));
  }
}

void AddMemoryFields(nlohmann::json& record, const char* memory_kind, const DeviceRdma& rdma) {
  auto known = [](int value) { return value < 0 ? nlohmann::json() : nlohmann::json(value > 0); };
  record["memory"] = MemoryLabel(memory_kind, rdma);
  record["device_rdma"] = known(rdma.device_rdma);
  record["emulated_write"] = known(rdma.emulated_write);
}

}  // namespace tutorial
