#include "common/shm_names.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>

namespace tutorial {
namespace {

constexpr char kShmAddressPrefix[] = "fi_shm://";

// A decimal number of at most `max`; nullopt else.
std::optional<uint64_t> ParseDecimal(const std::string& text, uint64_t max) {
  // Canonical only: no sign, no spaces, no leading zero.
  if (text.empty() || text.size() > 20 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (max - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

}  // namespace

std::optional<ShmEndpointName> ParseShmName(const std::string& name) {
  std::string file = name.compare(0, sizeof(kShmAddressPrefix) - 1, kShmAddressPrefix) == 0
                         ? name.substr(sizeof(kShmAddressPrefix) - 1)
                         : name;
  size_t first = file.find(':');
  if (first == std::string::npos) return std::nullopt;
  size_t second = file.find(':', first + 1);
  if (second == std::string::npos) return std::nullopt;
  auto pid = ParseDecimal(file.substr(0, first), std::numeric_limits<pid_t>::max());
  auto uid =
      ParseDecimal(file.substr(first + 1, second - first - 1), std::numeric_limits<uid_t>::max());
  auto index = ParseDecimal(file.substr(second + 1), std::numeric_limits<uint32_t>::max());
  if (!pid || !uid || !index || *pid == 0) return std::nullopt;
  ShmEndpointName parsed;
  parsed.pid = static_cast<pid_t>(*pid);
  parsed.uid = static_cast<uid_t>(*uid);
  parsed.index = static_cast<uint32_t>(*index);
  parsed.file = file;
  return parsed;
}

std::optional<ShmEndpointName> ParseShmAddress(const std::vector<uint8_t>& address) {
  std::string name(address.begin(), address.end());
  return ParseShmName(name.c_str());  // up to the first NUL
}

std::string PrintableName(const std::string& text) {
  constexpr size_t kMaxShown = 80;
  std::string shown;
  for (size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      shown += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      shown += "\\x";
      shown += kHex[c >> 4];
      shown += kHex[c & 15];
    }
  }
  if (text.size() > kMaxShown) shown += "...";
  return shown;
}

bool ProcessGone(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

size_t RemoveFilesOfDeadProcess(const ShmEndpointName& peer, const std::string& dir) {
  if (peer.uid != getuid() || !ProcessGone(peer.pid)) return 0;
  size_t removed = 0;
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return 0;
  int dir_fd = dirfd(listing);
  while (dirent* entry = readdir(listing)) {
    auto name = ParseShmName(entry->d_name);
    if (!name || name->file != entry->d_name || name->pid != peer.pid || name->uid != peer.uid) {
      continue;
    }
    struct stat st {};
    if (fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    if (unlinkat(dir_fd, entry->d_name, 0) == 0) ++removed;
  }
  closedir(listing);
  return removed;
}

}  // namespace tutorial
