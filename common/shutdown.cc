#include "common/shutdown.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "common/network.h"

namespace tutorial {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void OnStopSignal(int) { g_stop.store(true, std::memory_order_relaxed); }

}  // namespace

void InstallStopHandlers() {
  // Before any endpoint exists: shm installs its own handler when it opens
  // one (it removes its files, then calls ours).
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
                                   double stuck_seconds)
    : program_(std::move(program)), networks_(std::move(networks)), stuck_seconds_(stuck_seconds) {
  thread_ = std::thread([this] { Watch(); });
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
    Clock::time_point since;
  };
  std::vector<Seen> seen(networks_.size());
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    if (stop_) break;
    auto now = Clock::now();
    for (size_t i = 0; i < networks_.size(); ++i) {
      uint64_t started = networks_[i]->provider_calls_started();
      uint64_t finished = networks_[i]->provider_calls_finished();
      if (started != seen[i].started || finished != seen[i].finished || started == finished) {
        seen[i] = Seen{started, finished, now};
      } else if (std::chrono::duration<double>(now - seen[i].since).count() > stuck_seconds_) {
        ExitStuck(i);
      }
    }
  }
}

void ProviderWatchdog::ExitStuck(size_t index) {
  char line[512];
  int n = std::snprintf(line, sizeof(line),
                        "%s: error: NIC %zu (%s) has been stuck inside one libfabric call for "
                        "%.0f s (libfabric 1.17's shm spins forever on a message longer than "
                        "the receive posted for it, and its peers then wait on it); exiting\n",
                        program_.c_str(), index, networks_[index]->name().c_str(), stuck_seconds_);
  // The stuck thread may hold stdio's locks; write(2) takes none.
  if (n > 0) {
    ssize_t ignored = write(STDERR_FILENO, line, std::min<size_t>(n, sizeof(line) - 1));
    (void)ignored;
  }
  for (Network* net : networks_) UnlinkProviderFiles(*net);
  _exit(1);
}

}  // namespace tutorial
