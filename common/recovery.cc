#include "common/recovery.h"

#include <dirent.h>
#include <dlfcn.h>
#include <rdma/fabric.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucontext.h>
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
#include "common/shutdown.h"
#include "common/thread_stats.h"

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

// "fi_shm://123:0:4" -> "123:0:4" (the file under /dev/shm); "" if no name.
std::string ShmFileName(const std::vector<uint8_t>& address) {
  static const std::string kPrefix = "fi_shm://";
  std::string name(address.begin(), address.end());
  name = name.c_str();  // up to the NUL
  if (name.compare(0, kPrefix.size(), kPrefix) == 0) name = name.substr(kPrefix.size());
  if (name.empty() || name.find('/') != std::string::npos) return "";
  return name;
}

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
  ForEachNet(
      [this](size_t, size_t, Network& net) { start_counts_.push_back(net.meter().counters()); });
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
    NetworkCounters c = net.meter().counters() - start_counts_[i++];
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
  // (common/thread_stats.h). One clock per NIC's polling thread; the stall
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
      stalled[i].Tick(tick, SampleThread(net.meter().caller()));
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
  return provider.find("tcp") != std::string::npos;
}

std::string RebuildNetworks(Node& node) {
  size_t undrained = 0;
  ForEachNetOf(node, [&](size_t g, size_t n, Network& net) {
    undrained += Recovery::Detached(net);
    // A new address: no client needs a data endpoint's (they know the
    // server's front door), and no provider has to take an old one back.
    try {
      Recovery::ResetEndpoint(net, /*keep_address=*/false);
    } catch (const RuntimeError& e) {
      throw RuntimeError("cannot recover after a lost client: " + NicName(g, n) + ": " + e.what() +
                         "; restart the server");
    }
  });
  return "; rebuilt every endpoint" +
         (undrained > 0 ? " (" + std::to_string(undrained) + " operation(s) never completed)"
                        : std::string());
}

int PeerProcess(const Network& net, const std::vector<uint8_t>& address) {
  if (!IsShm(net)) return 0;
  // Names are "<pid>:<uid>:<index>" unless an application chose its own.
  std::string file = ShmFileName(address);
  char* end = nullptr;
  long pid = std::strtol(file.c_str(), &end, 10);
  if (end == file.c_str() || *end != ':' || pid <= 0) return 0;
  return static_cast<int>(pid);
}

bool PeerKnownDead(const Network& net, const std::vector<uint8_t>& address) {
  int pid = PeerProcess(net, address);
  return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

uint64_t PeerEndpointIdentity(const Network& net, const std::vector<uint8_t>& address) {
  if (!IsShm(net)) return 0;
  std::string file = ShmFileName(address);
  struct stat st {};
  if (file.empty() || stat(("/dev/shm/" + file).c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

void RemoveFilesOfDeadPeers(const Network& net, const std::vector<std::vector<uint8_t>>& peers) {
  for (const auto& address : peers) {
    if (!PeerKnownDead(net, address)) continue;
    // All of that process's endpoints ("<pid>:<uid>:<index>"), not only
    // the one we know: a dead server's other NICs are named the same way.
    std::string file = ShmFileName(address);
    std::string prefix = file.substr(0, file.find(':', file.find(':') + 1) + 1);
    if (DIR* dir = opendir("/dev/shm")) {
      while (dirent* entry = readdir(dir)) {
        if (std::string(entry->d_name).rfind(prefix, 0) == 0) shm_unlink(entry->d_name);
      }
      closedir(dir);
    }
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

void OwedFills::Expire(TimePoint arrived) {
  while (!owed_.empty() &&
         arrived - owed_.front().first > std::chrono::duration<double>(kOwedSeconds))
    owed_.pop_front();
}

void OwedFills::Add(const Session& session) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = owed_.begin(); it != owed_.end(); ++it) {
    if (it->second == session) {
      owed_.erase(it);
      break;
    }
  }
  owed_.emplace_back(std::chrono::steady_clock::now(), session);
  if (owed_.size() > kMaxOwed) owed_.pop_front();
}

bool OwedFills::Take(const Session& session, TimePoint arrived) {
  std::lock_guard<std::mutex> lock(mutex_);
  Expire(arrived);
  for (auto it = owed_.begin(); it != owed_.end(); ++it) {
    if (it->second == session) {
      owed_.erase(it);
      return true;
    }
  }
  return false;
}

size_t OwedFills::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return owed_.size();
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
  const std::string uid = std::to_string(getuid());
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) {
      // shm's names: "<pid>:<uid>:<index>", nothing else.
      std::string name = entry->d_name;
      char* end = nullptr;
      long pid = std::strtol(name.c_str(), &end, 10);
      if (end == name.c_str() || *end != ':' || pid <= 0 || pid == getpid()) continue;
      std::string rest = end + 1;
      if (rest.compare(0, uid.size() + 1, uid + ":") != 0) continue;
      std::string index = rest.substr(uid.size() + 1);
      if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) continue;
      if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
      auto seen = seen_dead_.find(name);
      auto since = seen != seen_dead_.end() ? seen->second : now;
      if (now - since >= kDeadFor) {
        shm_unlink(name.c_str());
      } else {
        still_dead.emplace(name, since);
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

namespace {
// Built before any crash: a signal handler may not allocate.
char crash_program[128];
// The strings argv and envp point into; an object, not a pointer, so that
// nothing reads as leaked (a pointer only written was optimised away).
std::vector<std::string> crash_restart_strings;
std::vector<char*>* crash_restart_argv = nullptr;
std::vector<char*>* crash_restart_envp = nullptr;

void WriteText(const char* text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    ssize_t n = write(STDERR_FILENO, text, length);
    if (n <= 0) return;
    text += n;
    length -= static_cast<size_t>(n);
  }
}

void OnCrash(int sig, siginfo_t*, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
#if defined(__x86_64__)
  void* pc = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  void* pc = reinterpret_cast<void*>(uc->uc_mcontext.pc);
#else
  void* pc = nullptr;
#endif
  Dl_info info{};
  if (pc == nullptr || dladdr(pc, &info) == 0 || info.dli_fname == nullptr ||
      std::strstr(info.dli_fname, "libfabric") == nullptr) {
    // Not inside libfabric: our own bug, which must stay visible.
    signal(sig, SIG_DFL);
    return;
  }
  char line[768];
  std::snprintf(line, sizeof(line),
                "%s: error: %s inside libfabric %u.%u (%s+0x%lx); known shm bugs "
                "(common/recovery.h): A smr_progress_iov on a stale peer id after "
                "fi_av_remove, B smr_progress_connreq on a peer whose /dev/shm file is gone; %s\n",
                crash_program, sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", FI_MAJOR(fi_version()),
                FI_MINOR(fi_version()), info.dli_fname,
                static_cast<unsigned long>(reinterpret_cast<uintptr_t>(pc) -
                                           reinterpret_cast<uintptr_t>(info.dli_fbase)),
                crash_restart_argv != nullptr ? "restarting in place" : "exiting");
  WriteText(line);
  if (crash_restart_argv != nullptr) {
    execve("/proc/self/exe", crash_restart_argv->data(), crash_restart_envp->data());
  }
  _exit(1);
}
}  // namespace

void InstallCrashGuard(const char* program) {
  std::snprintf(crash_program, sizeof(crash_program), "%s", program);
  struct sigaction action {};
  action.sa_sigaction = OnCrash;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, nullptr);
  sigaction(SIGBUS, &action, nullptr);
}

void ArmCrashRestart(const std::vector<std::string>& argv, const std::string& address_hex) {
  const char* count = std::getenv(kRestartCountVariable);
  int restarts = count != nullptr ? std::atoi(count) : 0;
  if (argv.empty() || restarts >= StuckPolicy::kMaxRestarts) return;
  // Kept for the life of the process: the handler may run at any time.
  if (crash_restart_argv != nullptr) return;  // armed once per process
  std::vector<std::string>* strings = &crash_restart_strings;
  *strings = argv;
  size_t args = strings->size();
  for (char** e = environ; *e != nullptr; ++e) {
    std::string variable = *e;
    if (variable.rfind(std::string(kRestartAddressVariable) + "=", 0) == 0 ||
        variable.rfind(std::string(kRestartCountVariable) + "=", 0) == 0) {
      continue;
    }
    strings->push_back(variable);
  }
  strings->push_back(std::string(kRestartAddressVariable) + "=" + address_hex);
  strings->push_back(std::string(kRestartCountVariable) + "=" + std::to_string(restarts + 1));
  auto* restart_argv = new std::vector<char*>();
  auto* restart_envp = new std::vector<char*>();
  for (size_t i = 0; i < strings->size(); ++i) {
    (i < args ? restart_argv : restart_envp)->push_back((*strings)[i].data());
  }
  restart_argv->push_back(nullptr);
  restart_envp->push_back(nullptr);
  crash_restart_envp = restart_envp;
  crash_restart_argv = restart_argv;
}

void TakeBackAddressAfterRestart(Network& front_door) {
  const char* hex = std::getenv(kRestartAddressVariable);
  if (hex == nullptr) return;
  const char* count = std::getenv(kRestartCountVariable);
  std::printf("Restarted in place after a provider call got stuck (restart %s of at most %d).\n",
              count != nullptr ? count : "?", StuckPolicy::kMaxRestarts);
  if (!KeepsAddressOnRebuild(front_door.info().fabric_attr->prov_name)) return;
  try {
    std::vector<uint8_t> address = FromHex(hex);
    if (address != front_door.address()) Recovery::ReopenAt(front_door, address);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "server: warning: could not take back the old address: %s\n", e.what());
    Recovery::ResetEndpoint(front_door, /*keep_address=*/false);
  }
}

}  // namespace tutorial
