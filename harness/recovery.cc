#include "harness/recovery.h"

#include <dirent.h>
#include <rdma/fabric.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "common/errors.h"
#include "common/messages.h"
#include "common/progress.h"
#include "common/shm_names.h"
#include "harness/shutdown.h"
#include "harness/thread_stats.h"

namespace tutorial {
namespace {

template <typename F>
void ForEachNetOf(Node& node, F&& f) {
  for (size_t g = 0; g < node.num_gpus(); ++g) {
    for (size_t n = 0; n < node.nics_per_gpu(); ++n) f(g, n, node.net(g, n));
  }
}

std::string NicName(size_t gpu, size_t nic) {
  return "GPU " + std::to_string(gpu) + " NIC " + std::to_string(nic);
}

bool IsShm(const Network& net) { return std::string(net.info().fabric_attr->prov_name) == "shm"; }

}  // namespace

bool DrainTransmits(Node& node, double seconds) {
  constexpr double kIdleSeconds = 1.0;
  // Silenced first: a writer that stopped must not hear of completions that
  // come late (one abandoned in its warmup printed "Warmup completed" here).
  ForEachNetOf(node, [](size_t, size_t, Network& net) {
    Recovery::SilenceTransmits(net);
    Recovery::CancelQueuedTransmits(net);
  });
  auto start = Clock::now();
  auto last_progress = start;
  for (;;) {
    size_t in_flight = 0;
    size_t handled = 0;
    ForEachNetOf(node, [&](size_t, size_t, Network& net) {
      try {
        handled += net.PollCompletion();
      } catch (const std::exception&) {
        // A broken peer can make polling fail; what counts is the drain.
      }
      in_flight += net.outstanding_transmits();
    });
    if (in_flight == 0) return true;
    auto now = Clock::now();
    if (handled > 0) last_progress = now;
    if (std::chrono::duration<double>(now - start).count() > seconds ||
        std::chrono::duration<double>(now - last_progress).count() > kIdleSeconds) {
      ForEachNetOf(node, [](size_t, size_t, Network& net) { Recovery::DetachTransmits(net); });
      return false;
    }
  }
}

TransferWatch::TransferWatch(Node& node, double stall_seconds, std::vector<uint8_t> client)
    : node_(node), stall_seconds_(stall_seconds), client_(std::move(client)) {
  ForEachNet([this](size_t, size_t, Network& net) {
    start_counts_.push_back(NicHarness::Of(net).meter().counters());
  });
  ForEachNet([this](size_t, size_t, Network& net) {
    Recovery::OnOrphanError(net, [this](Network& failed, const std::string& error) {
      Abandon(failed.name() + " reported a failed write without naming it (" + error +
              "); the client is likely gone");
    });
  });
  thread_ = std::thread([this] {
    NameThisThread("watch-transfer");
    MoveHelperThreadOffWriters();
    Watch();
  });
}

void TransferWatch::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  ForEachNet([](size_t, size_t, Network& net) { Recovery::OnOrphanError(net, nullptr); });
}

std::string TransferWatch::reason() const {
  std::lock_guard<std::mutex> lock(reason_mutex_);
  return reason_;
}

template <typename F>
void TransferWatch::ForEachNet(F&& f) {
  ForEachNetOf(node_, f);
}

std::string TransferWatch::CountsSinceStart() {
  std::string text;
  size_t i = 0;
  ForEachNet([&](size_t g, size_t n, Network& net) {
    NetworkCounters c = NicHarness::Of(net).meter().counters() - start_counts_[i++];
    if (c.writes == c.cq_entries) return;  // only the NICs that owe completions
    text += (text.empty() ? "" : ", ") + NicName(g, n) + " took " + std::to_string(c.writes) +
            " WRITEs and completed " + std::to_string(c.cq_entries) + " (" +
            std::to_string(c.eagain) + " posts refused)";
  });
  return text.empty() ? "every WRITE a NIC took has completed" : text;
}

uint64_t TransferWatch::Completions() {
  uint64_t sum = 0;
  ForEachNet([&sum](size_t, size_t, Network& net) { sum += Recovery::TransmitCompletions(net); });
  return sum;
}

void TransferWatch::Abandon(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    if (!reason_.empty()) return;
    reason_ = reason;
  }
  abandoned_.store(true, std::memory_order_release);
}

void TransferWatch::Watch() {
  uint64_t last = Completions();
  // Time without a completion counts only while the threads that poll the
  // NICs get a core: one that does not cannot see the completions
  // (harness/thread_stats.h). One clock per NIC's polling thread; the stall
  // is the shortest of them.
  std::vector<ProgressClock> stalled;
  ForEachNet([&stalled](size_t, size_t, Network&) { stalled.emplace_back(); });
  auto last_tick = Clock::now();
  auto next_liveness_check = last_tick;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(50));
    // shm names the client's process: a dead one is known at once. (tcp
    // tells by failing the writes, which the writer sees; efa cannot tell,
    // so only the stall below decides there.)
    if (!client_.empty() && Clock::now() >= next_liveness_check) {
      next_liveness_check = Clock::now() + std::chrono::milliseconds(200);
      if (PeerKnownDead(node_.net(0, 0), client_)) {
        Abandon("the client's process (" + std::to_string(PeerProcess(node_.net(0, 0), client_)) +
                ") is gone");
      }
    }
    // The provider's asynchronous errors (EFA's internal operations).
    ForEachNet([this](size_t, size_t, Network& net) {
      std::string error = Recovery::TakeEventError(net);
      if (!error.empty()) Abandon("the provider reported an error: " + error);
    });
    uint64_t now_completed = Completions();
    auto now = Clock::now();
    double tick = std::chrono::duration<double>(now - last_tick).count();
    last_tick = now;
    if (now_completed != last) {
      last = now_completed;
      for (ProgressClock& clock : stalled) clock.Reset();
      continue;
    }
    size_t i = 0;
    double stall = stall_seconds_ + 1;
    ForEachNet([&](size_t, size_t, Network& net) {
      stalled[i].Tick(tick, SampleThread(NicHarness::Of(net).meter().caller()));
      stall = std::min(stall, stalled[i++].seconds());
    });
    if (stall > stall_seconds_) {
      // Only silence tells here: efa (and any provider without
      // connections) reports nothing when a peer dies, and a peer that is
      // alive but stopped looks the same.
      const char* provider = node_.net(0, 0).info().fabric_attr->prov_name;
      char text[320];
      std::snprintf(text, sizeof(text),
                    "no NIC completed anything for %.0f s: the client stopped responding or "
                    "cannot be reached, or the NICs stalled (%s gave no sign of a dead peer; "
                    "%s)",
                    stall_seconds_, provider,
                    std::string(provider).find("efa") != std::string::npos
                        ? "efa reports nothing when a peer dies, so the deadline decides"
                        : "the deadline decides");
      Abandon(text + std::string(" [since it began: ") + CountsSinceStart() + "]");
    }
  }
}

bool KeepsAddressOnRebuild(const std::string& provider) {
  return provider.find("tcp") != std::string::npos || provider == "shm";
}

double FloodOverSeconds(const std::string& provider) {
  if (provider.find("ofi_rxm") != std::string::npos) return 0.5;
  // A client told BUSY asks again within 5 s x 1.5 (common/client.cc);
  // the rest is margin for a loaded machine.
  if (provider == "shm" && FI_MAJOR(fi_version()) >= 2) return 10.0;
  return 0;
}

std::string RebuildNetworks(Node& node) {
  size_t undrained = 0;
  ForEachNetOf(node, [&](size_t g, size_t n, Network& net) {
    undrained += Recovery::Detached(net);
    // A new address: no client needs a data endpoint's (they know the
    // server's front door), and no provider has to take an old one back.
    try {
      if (Recovery::ClosedEndpointsEndangerDomain(net)) {
        node.RegisterAgain(g, n, [&net] { Recovery::ResetDomain(net, /*keep_address=*/false); });
      } else {
        Recovery::ResetEndpoint(net, /*keep_address=*/false);
      }
    } catch (const std::runtime_error& e) {
      throw ProviderError("cannot recover after a lost client: " + NicName(g, n) + ": " + e.what() +
                          "; restart the server");
    }
  });
  return "; rebuilt every endpoint" +
         (undrained > 0 ? " (" + std::to_string(undrained) + " operation(s) never completed)"
                        : std::string());
}

int PeerProcess(const Network& net, const std::vector<uint8_t>& address) {
  if (!IsShm(net)) return 0;
  auto name = ParseShmAddress(address);
  return name ? static_cast<int>(name->pid) : 0;
}

bool PeerKnownDead(const Network& net, const std::vector<uint8_t>& address) {
  return ProcessGone(PeerProcess(net, address));
}

void RemoveFilesOfDeadPeers(const Network& net, const std::vector<std::vector<uint8_t>>& peers) {
  if (!IsShm(net)) return;
  for (const auto& address : peers) {
    // All of that process's endpoints, not only the one we know: a dead
    // server's other NICs are named the same way.
    if (auto name = ParseShmAddress(address)) RemoveFilesOfDeadProcess(*name);
  }
}

BusyAnswerer::BusyAnswerer(std::function<size_t()> tend) : tend_(std::move(tend)) {
  thread_ = std::thread([this] {
    NameThisThread("busy-answerer");
    MoveHelperThreadOffWriters();
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      lock.unlock();
      size_t handled = 0;
      try {
        handled = tend_();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "server: warning: front door: %s\n", e.what());
      }
      lock.lock();
      // 20 ms, not less: a thread that sleeps and wakes every millisecond
      // beside pinned busy threads (the writers) was measured starving
      // other processes for seconds on Linux 6.x (docs/simnic.md, "Why
      // CI's chapter 12 still stalled"). A BUSY answer may be 20 ms late.
      if (handled == 0) wake_.wait_for(lock, kBusyAnswererNap);
    }
  });
}

BusyAnswerer::~BusyAnswerer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StaleFileSweeper::Sweep() {
  // Long enough for any live peer to have read a name the dead process sent
  // (ours poll their endpoints every millisecond or so, busy machine or not).
  constexpr auto kDeadFor = std::chrono::seconds(1);
  if (!IsShm(front_door_)) return;
  auto now = std::chrono::steady_clock::now();
  if (now < next_sweep_) return;
  next_sweep_ = now + std::chrono::seconds(1);
  std::map<std::string, std::chrono::steady_clock::time_point> still_dead;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) {
      auto name = ParseShmName(entry->d_name);
      if (!name || name->file != entry->d_name || name->uid != getuid() || name->pid == getpid() ||
          !ProcessGone(name->pid)) {
        continue;
      }
      auto seen = seen_dead_.find(name->file);
      auto since = seen != seen_dead_.end() ? seen->second : now;
      if (now - since >= kDeadFor) {
        RemoveFilesOfDeadProcess(*name);
      } else {
        still_dead.emplace(name->file, since);
      }
    }
    closedir(dir);
  }
  seen_dead_.swap(still_dead);
}

namespace {
sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}
}  // namespace

StopSignalsHeld::StopSignalsHeld() {
  sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

StopSignalsHeld::~StopSignalsHeld() {
  InstallStopHandlers();
  sigset_t signals = StopSignals();
  pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
}

}  // namespace tutorial
