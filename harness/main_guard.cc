#include "harness/main_guard.h"

#include <fcntl.h>
#include <rdma/fabric.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "common/errors.h"

namespace tutorial {
namespace {

int Report(const char* program, const char* message, int code) {
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fflush(stdout);
  std::fprintf(stderr, "%s: error: %s\n", program, line.c_str());
  return code;
}

// What the crash handler needs, made before any crash: a handler may call
// only async-signal-safe functions (no stdio, no allocation, no dladdr), so
// it writes fixed text and numbers it formats itself, and finds the
// faulting library in /proc/self/maps with open and read.
char crash_program[128];
char crash_libfabric[32];  // "libfabric 1.17"

void WriteText(const char* text, size_t length) {
  while (length > 0) {
    ssize_t n = write(STDERR_FILENO, text, length);
    if (n <= 0) return;
    text += n;
    length -= static_cast<size_t>(n);
  }
}
void WriteText(const char* text) { WriteText(text, std::strlen(text)); }

void WriteHex(uintptr_t value) {
  char digits[2 + 2 * sizeof(value)];
  size_t at = sizeof(digits);
  do {
    digits[--at] = "0123456789abcdef"[value & 0xf];
    value >>= 4;
  } while (value != 0);
  digits[--at] = 'x';
  digits[--at] = '0';
  WriteText(digits + at, sizeof(digits) - at);
}

// Parses a hex number at `*p`, moving past it.
uintptr_t ParseHex(const char** p, const char* end) {
  uintptr_t value = 0;
  for (; *p < end; ++*p) {
    char c = **p;
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) break;
    value = value * 16 + static_cast<uintptr_t>(digit);
  }
  return value;
}

// The mapping of /proc/self/maps that holds `pc`: its file (into `path`,
// NUL-terminated, empty for none) and the offset of `pc` in that file.
// One maps line: "start-end perms offset dev inode   path".
void FindMapping(uintptr_t pc, char* path, size_t path_size, uintptr_t* offset) {
  static char chunk[4096];
  static char line[512];
  path[0] = '\0';
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  size_t used = 0;  // bytes of the line being gathered
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (chunk[i] != '\n') {
        if (used < sizeof(line)) line[used++] = chunk[i];
        continue;
      }
      const char* p = line;
      const char* end = line + used;
      used = 0;
      uintptr_t start = ParseHex(&p, end);
      if (p < end && *p == '-') ++p;
      uintptr_t stop = ParseHex(&p, end);
      if (pc < start || pc >= stop) continue;
      // perms, offset, dev, inode, then the path (after spaces).
      while (p < end && *p == ' ') ++p;
      while (p < end && *p != ' ') ++p;
      while (p < end && *p == ' ') ++p;
      *offset = pc - start + ParseHex(&p, end);
      for (int field = 0; field < 2; ++field) {
        while (p < end && *p == ' ') ++p;
        while (p < end && *p != ' ') ++p;
      }
      while (p < end && *p == ' ') ++p;
      size_t length = static_cast<size_t>(end - p);
      if (length >= path_size) length = path_size - 1;
      std::memcpy(path, p, length);
      path[length] = '\0';
      close(fd);
      return;
    }
  }
  close(fd);
}

bool IsProviderLibrary(const char* path) {
  const char* slash = std::strrchr(path, '/');
  const char* name = slash != nullptr ? slash + 1 : path;
  size_t length = std::strlen(name);
  // libfabric.so.1, or a provider it loaded from FI_PROVIDER_PATH (lib<name>-fi.so).
  return std::strstr(name, "libfabric") != nullptr ||
         (length > 6 && std::strcmp(name + length - 6, "-fi.so") == 0);
}

extern "C" void OnCrash(int sig, siginfo_t*, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
#if defined(__x86_64__)
  uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.pc);
#else
  uintptr_t pc = 0;
#endif
  static char path[256];
  uintptr_t offset = 0;
  if (pc != 0) FindMapping(pc, path, sizeof(path), &offset);
  if (pc == 0 || !IsProviderLibrary(path)) {
    // Not inside libfabric: our own bug, which must stay visible. The
    // default action ends the process now (SA_NODEFER: not held back);
    // after a fault, returning would also run the instruction again.
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  WriteText(crash_program);
  WriteText(sig == SIGSEGV ? ": error: SIGSEGV inside " : ": error: SIGBUS inside ");
  WriteText(crash_libfabric);
  WriteText(" (");
  WriteText(path);
  WriteText("+");
  WriteHex(offset);
  WriteText(
      "); known provider bugs (docs/provider-failures.md): A shm's smr_progress_iov on a stale "
      "peer id after fi_av_remove, B shm's smr_progress_connreq on a peer whose /dev/shm file "
      "is gone, C tcp 2.x's xnet_run_conn on a half-made connection to a closed endpoint; "
      "exiting (code 3: start it again, e.g. under tools/serve_forever.sh)\n");
  _exit(kExitProviderFailed);
}

}  // namespace

int GuardedMain(const char* program, const std::function<int()>& body) {
  // Line by line even into a file or pipe, so progress shows up as it
  // happens and stays in order with the error lines on stderr.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return body();
  } catch (const UsageError& e) {
    return Report(program, e.what(), kExitUsage);
  } catch (const ProviderError& e) {
    return Report(program, e.what(), kExitProviderFailed);
  } catch (const std::exception& e) {
    return Report(program, e.what(), 1);
  }
}

void InstallCrashGuard(const char* program) {
  std::snprintf(crash_program, sizeof(crash_program), "%s", program);
  std::snprintf(crash_libfabric, sizeof(crash_libfabric), "libfabric %u.%u", FI_MAJOR(fi_version()),
                FI_MINOR(fi_version()));
  struct sigaction action {};
  action.sa_sigaction = OnCrash;
  // SA_RESETHAND: a fault inside the handler itself gets the default
  // action; SA_NODEFER: it is not held back meanwhile either.
  action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, nullptr);
  sigaction(SIGBUS, &action, nullptr);
}

}  // namespace tutorial
