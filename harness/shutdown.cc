#include "harness/shutdown.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/network.h"
#include "common/shm_names.h"
#include "harness/main_guard.h"
#include "harness/recovery_nic.h"
#include "harness/thread_stats.h"

namespace tutorial {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void OnStopSignal(int) { g_stop.store(true, std::memory_order_relaxed); }

// The stuck thread may hold stdio's locks; write(2) takes none.
void WriteLine(int fd, const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = write(fd, line.data() + done, line.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Where a stuck thread is, for the line that reports it (instrumentation:
// it only runs when the watchdog is about to end the process). The kernel's
// view needs nothing of the thread; its stack needs it to take a signal,
// which it does as soon as it runs (under ThreadSanitizer: at its next call
// into the sanitizer's runtime, so the stack may be a little past the spot).
constexpr int kMaxStackFrames = 32;
std::atomic<int> g_stack_thread{0};  // the thread asked for its stack
std::atomic<int> g_stack_depth{-1};  // frames it wrote, -1 until it has
void* g_stack[kMaxStackFrames];

extern "C" void OnStackRequest(int) {
  int saved_errno = errno;  // a handler must leave errno as it found it
  if (static_cast<int>(syscall(SYS_gettid)) == g_stack_thread.load(std::memory_order_acquire)) {
    // backtrace is not on POSIX's list of async-signal-safe functions: its
    // first call loads the unwinder (made outside any handler, in
    // DescribeStuckThread), and after that its one risk is a lock of the
    // unwinder that this thread might hold. Then it waits here for good;
    // the watchdog gives up after 1 s ("no stack") and the process ends
    // anyway. The only such call in a handler of ours, and only in a
    // process about to end.
    int depth = backtrace(g_stack, kMaxStackFrames);
    g_stack_depth.store(depth, std::memory_order_release);
  }
  errno = saved_errno;
}

int StackRequestSignal() { return SIGRTMIN + 5; }

std::string FirstLineOf(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// "name+0x1a (lib)", or "lib+0x1234" without a symbol: enough for addr2line.
std::string DescribeFrame(void* pc) {
  char text[200];
  Dl_info info{};
  if (dladdr(pc, &info) == 0 || info.dli_fname == nullptr) {
    std::snprintf(text, sizeof(text), "%p", pc);
    return text;
  }
  const char* slash = std::strrchr(info.dli_fname, '/');
  const char* lib = slash != nullptr ? slash + 1 : info.dli_fname;
  if (info.dli_sname == nullptr || info.dli_saddr == nullptr) {
    std::snprintf(
        text, sizeof(text), "%s+%#lx", lib,
        static_cast<unsigned long>(static_cast<char*>(pc) - static_cast<char*>(info.dli_fbase)));
    return text;
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::free(demangled);
  if (name.size() > 120) name = name.substr(0, 117) + "...";
  std::snprintf(
      text, sizeof(text), "+%#lx (%s)",
      static_cast<unsigned long>(static_cast<char*>(pc) - static_cast<char*>(info.dli_saddr)), lib);
  return name + text;
}

}  // namespace

std::string DescribeStuckThread(int tid) {
  if (tid <= 0) return "no thread known";
  const std::string task = "/proc/self/task/" + std::to_string(tid) + "/";
  std::string stat = FirstLineOf(task + "stat");
  size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size())
    return "thread " + std::to_string(tid) + " is gone";
  std::string where = "thread " + std::to_string(tid) + " (" + FirstLineOf(task + "comm") +
                      "): state " + stat[close + 2];
  std::string wchan = FirstLineOf(task + "wchan");
  if (!wchan.empty() && wchan != "0") where += ", waits in " + wchan;
  // "running", or the system call's number, arguments, stack and pc.
  std::string syscall_line = FirstLineOf(task + "syscall");
  if (!syscall_line.empty() && syscall_line != "running" && syscall_line != "-1")
    where += ", system call " + syscall_line.substr(0, syscall_line.find(' '));
  // Its stack, from a handler that runs on that thread. backtrace() loads
  // the unwinder at its first call: here, not in the handler.
  void* warm_up[1];
  backtrace(warm_up, 1);
  struct sigaction action {};
  action.sa_handler = OnStackRequest;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  g_stack_depth.store(-1, std::memory_order_relaxed);
  g_stack_thread.store(tid, std::memory_order_release);
  if (sigaction(StackRequestSignal(), &action, nullptr) != 0 ||
      syscall(SYS_tgkill, getpid(), tid, StackRequestSignal()) != 0) {
    return where + "; no stack (it could not be signalled)";
  }
  int depth = -1;
  for (int waited_ms = 0; waited_ms < 1000; waited_ms += 10) {
    depth = g_stack_depth.load(std::memory_order_acquire);
    if (depth >= 0) break;
    usleep(10000);
  }
  if (depth < 0) return where + "; no stack (it took no signal within 1 s)";
  where += "; stack:";
  // Frame 0 is the handler itself.
  for (int i = 1; i < depth; ++i)
    where += std::string(i == 1 ? " " : " < ") + DescribeFrame(g_stack[i]);
  return where;
}

void InstallStopHandlers() {
  // Called before any endpoint exists, and again once they do: shm installs
  // its own handler when it opens one (it removes its files at once, then
  // calls ours), and a peer that reads our name after that crashes
  // (docs/provider-failures.md, point 3). Ours only asks the loops to stop; the
  // files go when the endpoints close.
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool StopRequested() { return g_stop.load(std::memory_order_relaxed); }

void UnlinkProviderFiles(const Network& network) {
  // Only our own endpoint's file, and only under a name that parses.
  auto name = ParseShmAddress(network.address());
  if (name && name->pid == getpid()) shm_unlink(name->file.c_str());
}

ProviderWatchdog::ProviderWatchdog(std::string program, std::vector<Network*> networks,
                                   double stuck_seconds, StuckPolicy policy)
    : program_(std::move(program)),
      networks_(std::move(networks)),
      stuck_seconds_(stuck_seconds),
      policy_(std::move(policy)) {
  thread_ = std::thread([this] {
    NameThisThread("watchdog");
    MoveHelperThreadOffWriters();
    Watch();
  });
}

ProviderWatchdog::~ProviderWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ProviderWatchdog::Watch() {
  using Clock = std::chrono::steady_clock;
  struct Seen {
    uint64_t started = 0, finished = 0;
    ProgressClock inside;  // time inside the current call that counts
  };
  std::vector<Seen> seen(networks_.size());
  auto last_tick = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    if (stop_) break;
    auto now = Clock::now();
    double tick = std::chrono::duration<double>(now - last_tick).count();
    last_tick = now;
    for (size_t i = 0; i < networks_.size(); ++i) {
      uint64_t started = NicHarness::Of(*networks_[i]).meter().started();
      uint64_t finished = NicHarness::Of(*networks_[i]).meter().finished();
      if (started != seen[i].started || finished != seen[i].finished || started == finished) {
        seen[i] = Seen{started, finished, ProgressClock()};
        continue;
      }
      // Only time in which the caller ran or slept counts: one that got no
      // core (harness/thread_stats.h) is late, not stuck.
      seen[i].inside.Tick(tick, SampleThread(NicHarness::Of(*networks_[i]).meter().caller()));
      if (seen[i].inside.seconds() > stuck_seconds_) {
        EndStuck(i, seen[i].inside.counted_ticks(), seen[i].inside.longest_tick());
      }
    }
  }
}

// No thread of ours may be inside the provider when the process ends: on shm one may hold a lock in
// a peer's shared memory (a server writing into a client's queue), and that peer would spin on it
// for good (measured: the client a server that ended was writing to).
// New calls wait for the end (CallMeter::Begin); calls under way get up
// to 2 s to return; the stuck one never will.
void ProviderWatchdog::LetCallsReturn(size_t stuck) {
  provider_calls_frozen.store(true);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    bool inside = false;
    for (size_t i = 0; i < networks_.size(); ++i) {
      const CallMeter& meter = NicHarness::Of(*networks_[i]).meter();
      if (i != stuck && meter.started() != meter.finished()) inside = true;
    }
    if (!inside || std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ProviderWatchdog::EndStuck(size_t index, int looks, double longest_look) {
  // Name the provider that was seen stuck, and shm's known causes only for shm.
  const fi_info& info = networks_[index]->info();
  const char* provider = info.fabric_attr != nullptr && info.fabric_attr->prov_name != nullptr
                             ? info.fabric_attr->prov_name
                             : "unknown";
  const bool shm = std::strcmp(provider, "shm") == 0;
  const CallMeter& meter = NicHarness::Of(*networks_[index]).meter();
  char what[400];
  std::snprintf(what, sizeof(what),
                "NIC %zu (%s, provider %s) has been stuck inside one libfabric call (%s) for "
                "%.0f s (%s)",
                index, networks_[index]->name().c_str(), provider,
                ProviderCallName(meter.latest_call()), stuck_seconds_,
                shm ? "shm spins forever on a lock held by a peer that died or stopped, on a "
                      "message longer than its receive, or, on libfabric 2.x, on a queue a "
                      "flooding sender keeps full"
                    : "the provider did not return; its thread ran or slept, it was not "
                      "waiting for a core");
  // Where that thread is, and how the watchdog saw it, on the same line
  // (one line per error).
  char looked[96];
  std::snprintf(looked, sizeof(looked), "; seen in %d looks, at most %.1f s apart", looks,
                longest_look);
  const std::string where = " [" + DescribeStuckThread(meter.caller()) + looked + "]";
  LetCallsReturn(index);
  WriteLine(STDERR_FILENO, program_ + ": error: " + what + where + "; exiting (code " +
                               std::to_string(kExitProviderFailed) +
                               ": start it again, e.g. under tools/serve_forever.sh)\n");
  for (Network* net : networks_) UnlinkProviderFiles(*net);
  if (policy_.before_exit) policy_.before_exit();
  _exit(kExitProviderFailed);
}

}  // namespace tutorial
