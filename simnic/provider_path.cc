#include "simnic/provider_path.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace simnic {
namespace {

constexpr const char* kWorkspace = "libfabric_tutorial";
constexpr const char* kLibrary = "libsimnic-fi.so";

bool HasProvider(const std::string& dir) {
  struct stat st {};
  return !dir.empty() && stat((dir + "/" + kLibrary).c_str(), &st) == 0;
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

std::string UseBuiltProviderIfUnset(const std::string& provider) {
  if (provider != "simnic") return "";
  const char* set = std::getenv("FI_PROVIDER_PATH");
  if (set != nullptr && *set != 0) return "";
  std::vector<std::string> candidates;
  if (const char* runfiles = std::getenv("RUNFILES_DIR")) {
    candidates.push_back(std::string(runfiles) + "/" + kWorkspace + "/simnic");
  }
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    candidates.push_back(std::string(srcdir) + "/" + kWorkspace + "/simnic");
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = 0;
    std::string self(exe);
    // bazel run: <bin>/chapters/<chapter>/server.runfiles/<workspace>/simnic
    candidates.push_back(self + ".runfiles/" + kWorkspace + "/simnic");
    // Run from bazel-bin: <bin>/chapters/<chapter>/server -> <bin>/simnic
    candidates.push_back(Dirname(Dirname(Dirname(self))) + "/simnic");
  }
  for (const std::string& dir : candidates) {
    if (HasProvider(dir)) {
      setenv("FI_PROVIDER_PATH", dir.c_str(), 1);
      return dir;
    }
  }
  return "";
}

}  // namespace simnic
