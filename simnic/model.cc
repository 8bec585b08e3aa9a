#include "simnic/model.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

namespace simnic {
namespace {

void CarveSockets(Model* m);

template <typename T>
void ReadEnv(const char* name, T* value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == 0) return;
  char* end = nullptr;
  double parsed = std::strtod(text, &end);
  if (end == text || *end != 0 || parsed < 0) {
    std::fprintf(stderr, "simnic: ignoring %s=%s (not a non-negative number)\n", name, text);
    return;
  }
  *value = static_cast<T>(parsed);
}

Model ReadModel() {
  Model m;
  ReadEnv("SIMNIC_NICS", &m.nics);
  ReadEnv("SIMNIC_LINE_GBPS", &m.unscaled_gbps);
  ReadEnv("SIMNIC_SCALE", &m.scale);
  ReadEnv("SIMNIC_TX_DEPTH", &m.tx_depth);
  ReadEnv("SIMNIC_RX_DEPTH", &m.rx_depth);
  ReadEnv("SIMNIC_CQ_ENTRIES", &m.cq_entries);
  ReadEnv("SIMNIC_DOORBELL_NS", &m.doorbell_ns);
  ReadEnv("SIMNIC_REMOTE_NUMA_FACTOR", &m.remote_numa_factor);
  ReadEnv("SIMNIC_POST_NS", &m.post_ns);
  ReadEnv("SIMNIC_CQ_POLL_NS", &m.cq_poll_ns);
  ReadEnv("SIMNIC_CQ_ENTRY_NS", &m.cq_entry_ns);
  ReadEnv("SIMNIC_FIRST_CONTACT_NS", &m.first_contact_ns);
  ReadEnv("SIMNIC_LOCK_LINE_NS", &m.lock_line_ns);
  ReadEnv("SIMNIC_MIGRATE_US", &m.migrate_us);
  ReadEnv("SIMNIC_REFILL_NS", &m.refill_ns);
  ReadEnv("SIMNIC_NUMA_NODES", &m.numa_nodes);
  ReadEnv("SIMNIC_NICS_PER_GROUP", &m.nics_per_group);
  int direct = m.direct;
  ReadEnv("SIMNIC_DIRECT", &direct);
  m.direct = direct != 0;
  ReadEnv("SIMNIC_ENGINE_THREADS", &m.engine_threads);
  if (const char* cpus = std::getenv("SIMNIC_ENGINE_CPUS"); cpus != nullptr) {
    std::stringstream ranges(cpus);
    std::string range;
    while (std::getline(ranges, range, ',')) {
      int first = -1, last = -1;
      int got = std::sscanf(range.c_str(), "%d-%d", &first, &last);
      if (got == 1) last = first;
      if (got < 1 || first < 0 || last < first || last >= CPU_SETSIZE) {
        std::fprintf(stderr, "simnic: ignoring SIMNIC_ENGINE_CPUS=%s (not a CPU list)\n", cpus);
        m.engine_cpus.clear();
        break;
      }
      for (int cpu = first; cpu <= last; ++cpu) m.engine_cpus.push_back(cpu);
    }
  }
  ReadEnv("SIMNIC_RING_BYTES", &m.ring_bytes);
  ReadEnv("SIMNIC_RING_SLOTS", &m.ring_slots);
  // Keep the shapes the data path relies on.
  m.nics = std::clamp(m.nics, 1, 256);
  if (m.scale < 1) m.scale = 1;
  if (m.unscaled_gbps <= 0) m.unscaled_gbps = 100;
  m.tx_depth = std::clamp<size_t>(m.tx_depth, 1, 1 << 16);
  m.rx_depth = std::clamp<size_t>(m.rx_depth, 1, 1 << 16);
  m.cq_entries = std::clamp<size_t>(m.cq_entries, 64, 1 << 22);
  m.numa_nodes = std::clamp(m.numa_nodes, 1, 64);
  m.nics_per_group = std::clamp(m.nics_per_group, 1, m.nics);
  m.engine_threads = std::clamp(m.engine_threads, 1, 64);
  m.ring_bytes = std::clamp<size_t>(m.ring_bytes, 64 * 1024, size_t{1} << 30) / 64 * 64;
  m.ring_slots = std::clamp(m.ring_slots, 1, 1024);
  m.max_send = std::min(m.max_send, m.ring_bytes / 4);
  if (m.migrate_us < 1) m.migrate_us = 1;
  CarveSockets(&m);
  return m;
}

std::mutex model_mutex;
// Every model read so far: objects opened under an older one still read it,
// and all go when the provider is unloaded (no leak for LeakSanitizer).
std::deque<Model>& Models() {
  static std::deque<Model> models;
  return models;
}
Model* current_model = nullptr;

int ReadInt(const std::string& path, int fallback) {
  std::ifstream file(path);
  int value = fallback;
  if (!(file >> value)) return fallback;
  return value;
}

// The CPUs of the process's affinity mask, core by core in the order hwloc
// lists cores (packages by their first CPU, then cores by their first CPU),
// SMT siblings of a core together. Read once: the first model is read on
// the main thread before any thread pins itself.
const std::vector<std::vector<int>>& CoresOfMask() {
  static const std::vector<std::vector<int>> cores = [] {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    std::vector<std::vector<int>> result;
    if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return result;
    std::map<std::tuple<int, int, int>, std::vector<int>> by_core;  // (package, die, core)
    std::map<int, int> package_first;  // package -> its first CPU in the mask
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &mask)) continue;
      std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      int package = ReadInt(base + "physical_package_id", 0);
      by_core[{package, ReadInt(base + "die_id", 0), ReadInt(base + "core_id", cpu)}].push_back(
          cpu);
      package_first.emplace(package, cpu);  // CPUs come in increasing order
    }
    std::vector<std::tuple<int, int, std::vector<int>>> order;
    for (auto& [key, cpus] : by_core)
      order.emplace_back(package_first[std::get<0>(key)], cpus.front(), cpus);
    std::sort(order.begin(), order.end());
    for (auto& entry : order) result.push_back(std::get<2>(entry));
    return result;
  }();
  return cores;
}

void CarveSockets(Model* m) {
  const auto& cores = CoresOfMask();
  m->mask_cores = static_cast<int>(cores.size());
  m->cpu_socket.clear();
  for (size_t i = 0; i < cores.size(); ++i) {
    int socket = static_cast<int>(static_cast<int64_t>(i) * m->numa_nodes /
                                  static_cast<int64_t>(cores.size()));
    for (int cpu : cores[i]) {
      if (static_cast<int>(m->cpu_socket.size()) <= cpu) m->cpu_socket.resize(cpu + 1, -1);
      m->cpu_socket[cpu] = static_cast<int16_t>(socket);
    }
  }
}

}  // namespace

std::string Model::Summary() const {
  char line[896];
  std::snprintf(line, sizeof(line),
                "simnic (simulated EFA-like NIC): %d NICs x %.3g Gbps (%g Gbps / scale %g: a "
                "%g-byte page stands for 64 KiB), tx depth %zu, calls take what they charge: post "
                "%u ns, doorbell %u ns, CQ read %u ns + %u ns an entry (x%g from the other "
                "virtual socket for doorbell and entries), first contact %u ns, lock line "
                "%u ns, %d virtual sockets over %d cores, NICs by groups of %d, busy unpinned "
                "threads moved every %g us "
                "with a %u ns refill while they outnumber one socket's %d cores (simulated p5 "
                "scheduler), %d engine thread(s), efa-direct rules %s",
                nics, line_bps() / 1e9, unscaled_gbps, scale, 65536 / scale, tx_depth, post_ns,
                doorbell_ns, cq_poll_ns, cq_entry_ns, remote_numa_factor, first_contact_ns,
                lock_line_ns, numa_nodes, mask_cores, nics_per_group, migrate_us, refill_ns,
                std::max(1, mask_cores / std::max(1, numa_nodes)), engine_threads,
                direct ? "on" : "off");
  return line;
}

const Model& GetModel() {
  std::lock_guard<std::mutex> lock(model_mutex);
  if (current_model == nullptr) current_model = &Models().emplace_back(ReadModel());
  return *current_model;
}

void ReloadModel() {
  std::lock_guard<std::mutex> lock(model_mutex);
  current_model = &Models().emplace_back(ReadModel());
}

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SpinFor(uint64_t ns) {
  if (ns == 0) return;
  SpinUntil(NowNs() + ns);
}

uint64_t SpinUntil(uint64_t until_ns) {
  // No pause instruction in the loop: the wait ends as close to its length
  // as the clock allows (a pause can take ~140 cycles on recent Xeons).
  uint64_t now = NowNs();
  while (now < until_ns) now = NowNs();
  return now;
}

int NodeOfCpu(const Model& m, int cpu) {
  if (cpu < 0 || cpu >= static_cast<int>(m.cpu_socket.size())) return -1;
  return m.cpu_socket[cpu];
}

int NodeOfNic(int nic_index, int nics, int nodes, int nics_per_group) {
  if (nic_index < 0 || nics <= 0) return -1;
  int per_group = std::max(1, nics_per_group);
  int groups = (nics + per_group - 1) / per_group;
  return static_cast<int>(static_cast<int64_t>(nic_index / per_group) * nodes / groups);
}

namespace {

// The process's threads that call simnic, as the simulated balancer sees
// them: each owns one slot (a line of its own), written only by itself.
constexpr int kThreadSlots = 256;
constexpr uint64_t kBusyGapNs = 100000;   // calls closer than this keep a thread busy
constexpr uint64_t kBusyForNs = 1000000;  // ... and it counts once busy this long
struct alignas(64) ThreadSlot {
  std::atomic<uint64_t> last_end_ns{0};    // end of its last call (0: free slot)
  std::atomic<uint64_t> busy_since_ns{0};  // start of its current run of close calls
  std::atomic<bool> spans{false};          // its affinity spans both virtual sockets
  std::atomic<bool> in_call{false};        // inside a call now (busy, however long it spins)
};
ThreadSlot thread_slots[kThreadSlots];
std::atomic<int> slots_used{0};

// Plain data, so that a thread_local of a dlopen'ed provider needs no
// destructor.
struct ThreadPlace {
  const Model* model;
  uint32_t calls_until_check;
  bool spans;
  int socket;
  uint64_t next_move_ns;
  uint64_t rng;
  int slot;  // index + 1 in thread_slots (0: none yet)
};
thread_local ThreadPlace this_thread_place{};

uint64_t NextRandom(ThreadPlace& t) {
  t.rng ^= t.rng << 13;
  t.rng ^= t.rng >> 7;
  t.rng ^= t.rng << 17;
  return t.rng;
}

// Whether this thread may run on CPUs of more than one virtual socket.
bool AffinitySpansSockets(const Model& m) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return false;
  int seen = -1;
  for (int cpu = 0; cpu < static_cast<int>(m.cpu_socket.size()); ++cpu) {
    if (!CPU_ISSET(cpu, &mask) || m.cpu_socket[cpu] < 0) continue;
    if (seen >= 0 && m.cpu_socket[cpu] != seen) return true;
    seen = m.cpu_socket[cpu];
  }
  return false;
}

ThreadSlot* SlotOf(ThreadPlace& t) {
  if (t.slot == 0) {
    int index = slots_used.fetch_add(1, std::memory_order_relaxed);
    // More threads than slots (a long-lived process that made many):
    // share the last one; the count is then a lower bound.
    t.slot = std::min(index, kThreadSlots - 1) + 1;
  }
  return &thread_slots[t.slot - 1];
}

bool SlotBusy(const ThreadSlot& slot, uint64_t now_ns) {
  uint64_t end = slot.last_end_ns.load(std::memory_order_relaxed);
  uint64_t since = slot.busy_since_ns.load(std::memory_order_relaxed);
  bool recent = slot.in_call.load(std::memory_order_relaxed) || now_ns < end + kBusyGapNs;
  return end != 0 && recent && now_ns >= since + kBusyForNs;
}

// Cores of one virtual socket: how many busy threads it holds, one a core.
int SocketCores(const Model& m) { return std::max(1, m.mask_cores / std::max(1, m.numa_nodes)); }

}  // namespace

int BusyUnpinnedThreads(uint64_t now_ns) {
  int used = std::min(slots_used.load(std::memory_order_relaxed), kThreadSlots);
  int busy = 0;
  for (int i = 0; i < used; ++i) {
    if (thread_slots[i].spans.load(std::memory_order_relaxed) && SlotBusy(thread_slots[i], now_ns))
      ++busy;
  }
  return busy;
}

void EndOfCallOnThisThread(uint64_t now_ns) {
  ThreadPlace& t = this_thread_place;
  if (t.slot == 0) return;
  thread_slots[t.slot - 1].last_end_ns.store(now_ns, std::memory_order_relaxed);
  thread_slots[t.slot - 1].in_call.store(false, std::memory_order_relaxed);
}

Placement PlaceThisThread(const Model& m, uint64_t now_ns) {
  ThreadPlace& t = this_thread_place;
  ThreadSlot* slot = SlotOf(t);
  if (t.model != &m || t.calls_until_check == 0) {
    if (t.model != &m) t.next_move_ns = 0;
    t.model = &m;
    t.calls_until_check = 4096;
    t.spans = m.numa_nodes > 1 && AffinitySpansSockets(m);
    slot->spans.store(t.spans, std::memory_order_relaxed);
    if (t.rng == 0) t.rng = (now_ns ^ reinterpret_cast<uintptr_t>(&t)) | 1;
  }
  --t.calls_until_check;
  // A call after a long gap starts a new run of busy time.
  uint64_t last_end = slot->last_end_ns.load(std::memory_order_relaxed);
  if (last_end == 0 || now_ns >= last_end + kBusyGapNs)
    slot->busy_since_ns.store(now_ns, std::memory_order_relaxed);
  slot->last_end_ns.store(now_ns, std::memory_order_relaxed);
  slot->in_call.store(true, std::memory_order_relaxed);
  if (!t.spans) {
    t.next_move_ns = 0;
    return Placement{NodeOfCpu(m, sched_getcpu()), 0, false};
  }
  uint64_t refill = 0;
  if (t.next_move_ns == 0) {
    // First placement: either socket (it finds a cold cache anyway).
    t.socket = static_cast<int>(NextRandom(t) % static_cast<uint64_t>(m.numa_nodes));
  } else if (now_ns >= t.next_move_ns && SlotBusy(*slot, now_ns) &&
             BusyUnpinnedThreads(now_ns) > SocketCores(m)) {
    // The balancer has more busy threads than one socket's cores: it
    // spreads them and keeps moving them; this one moves now.
    refill = m.refill_ns;
    t.socket = static_cast<int>(NextRandom(t) % static_cast<uint64_t>(m.numa_nodes));
  }
  if (t.next_move_ns == 0 || now_ns >= t.next_move_ns) {
    // Balancing decisions come at random (exponential gaps, mean migrate_us).
    double u = (static_cast<double>(NextRandom(t) >> 11) + 0.5) / 9007199254740992.0;
    t.next_move_ns = now_ns + static_cast<uint64_t>(-std::log(u) * m.migrate_us * 1000.0);
  }
  return Placement{t.socket, refill, true};
}

void ForgetThisThreadsPlacement() { this_thread_place.model = nullptr; }

}  // namespace simnic
