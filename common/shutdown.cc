#include "common/shutdown.h"

#include <sys/mman.h>
#include <sys/resource.h>
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

#include "common/network.h"
#include "common/thread_stats.h"

extern char** environ;

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

int RestartsSoFar() {
  const char* value = std::getenv(kRestartCountVariable);
  return value != nullptr ? std::atoi(value) : 0;
}

// Closes every descriptor but stdin, stdout and stderr, so that the new
// image inherits no socket (tcp's listening port) and no provider file.
void CloseDescriptorsAbove2() {
#if defined(SYS_close_range)
  if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0) return;
#endif
  rlimit limit{};
  int last = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                 ? static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 16))
                 : 1 << 16;
  for (int fd = 3; fd < last; ++fd) close(fd);
}

}  // namespace

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
  static const char kShmPrefix[] = "fi_shm://";
  const std::vector<uint8_t>& address = network.address();
  std::string name(address.begin(), address.end());
  name = name.c_str();  // up to the NUL
  if (name.compare(0, sizeof(kShmPrefix) - 1, kShmPrefix) == 0) {
    shm_unlink(name.substr(sizeof(kShmPrefix) - 1).c_str());
  }
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
      uint64_t started = networks_[i]->meter().started();
      uint64_t finished = networks_[i]->meter().finished();
      if (started != seen[i].started || finished != seen[i].finished || started == finished) {
        seen[i] = Seen{started, finished, ProgressClock()};
        continue;
      }
      // Only time in which the caller ran or slept counts: one that got no
      // core (common/thread_stats.h) is late, not stuck.
      seen[i].inside.Tick(tick, SampleThread(networks_[i]->meter().caller()));
      if (seen[i].inside.seconds() > stuck_seconds_) EndStuck(i);
    }
  }
}

void ProviderWatchdog::EndStuck(size_t index) {
  // Name the provider that was seen stuck, and shm's known causes only for shm.
  const fi_info& info = networks_[index]->info();
  const char* provider = info.fabric_attr != nullptr && info.fabric_attr->prov_name != nullptr
                             ? info.fabric_attr->prov_name
                             : "unknown";
  const bool shm = std::strcmp(provider, "shm") == 0;
  char what[400];
  std::snprintf(what, sizeof(what),
                "NIC %zu (%s, provider %s) has been stuck inside one libfabric call for %.0f s "
                "(%s)",
                index, networks_[index]->name().c_str(), provider, stuck_seconds_,
                shm ? "shm spins forever on a lock held by a peer that died or stopped, or on a "
                      "message longer than its receive"
                    : "the provider did not return while its thread was running");
  int restarts = RestartsSoFar();
  bool restart =
      !policy_.restart_argv.empty() && !StopRequested() && restarts < StuckPolicy::kMaxRestarts;
  if (!restart) {
    WriteLine(STDERR_FILENO, program_ + ": error: " + what + "; exiting\n");
    for (Network* net : networks_) UnlinkProviderFiles(*net);
    if (policy_.before_exit) policy_.before_exit();
    _exit(1);
  }
  WriteLine(STDERR_FILENO, program_ + ": error: " + what +
                               "; restarting in place (same process id and address, restart " +
                               std::to_string(restarts + 1) + " of at most " +
                               std::to_string(StuckPolicy::kMaxRestarts) + ")\n");
  WriteLine(STDOUT_FILENO, std::string("Restarting: ") + what + "\n");
  // The new image creates the same shm names: the old files must be gone.
  for (Network* net : networks_) UnlinkProviderFiles(*net);
  CloseDescriptorsAbove2();

  // A fresh environment array: setenv is not safe with other threads alive.
  std::vector<std::string> variables;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string variable = *e;
    if (variable.rfind(std::string(kRestartAddressVariable) + "=", 0) == 0 ||
        variable.rfind(std::string(kRestartCountVariable) + "=", 0) == 0) {
      continue;
    }
    variables.push_back(std::move(variable));
  }
  variables.push_back(std::string(kRestartAddressVariable) + "=" + policy_.address_hex);
  variables.push_back(std::string(kRestartCountVariable) + "=" + std::to_string(restarts + 1));
  std::vector<char*> envp;
  for (auto& variable : variables) envp.push_back(variable.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (auto& arg : policy_.restart_argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execve("/proc/self/exe", argv.data(), envp.data());
  WriteLine(STDERR_FILENO, program_ + ": error: restart failed: " + std::strerror(errno) + "\n");
  _exit(1);
}

}  // namespace tutorial
