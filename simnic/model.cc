#include "simnic/model.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace simnic {
namespace {

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
  ReadEnv("SIMNIC_NUMA_NODES", &m.numa_nodes);
  int direct = m.direct;
  ReadEnv("SIMNIC_DIRECT", &direct);
  m.direct = direct != 0;
  ReadEnv("SIMNIC_ENGINE_THREADS", &m.engine_threads);
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
  m.engine_threads = std::clamp(m.engine_threads, 1, 64);
  m.ring_bytes = std::clamp<size_t>(m.ring_bytes, 64 * 1024, size_t{1} << 30) / 64 * 64;
  m.ring_slots = std::clamp(m.ring_slots, 1, 1024);
  m.max_send = std::min(m.max_send, m.ring_bytes / 4);
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

// Position of each online CPU in the online list, indexed by CPU number.
struct CpuList {
  std::vector<int> position;
  int count = 0;
};

CpuList ReadOnlineCpus() {
  CpuList list;
  std::ifstream file("/sys/devices/system/cpu/online");
  std::string text;
  std::getline(file, text);
  std::stringstream ranges(text);
  std::string range;
  while (std::getline(ranges, range, ',')) {
    int first = 0, last = 0;
    if (std::sscanf(range.c_str(), "%d-%d", &first, &last) < 2)
      last = first = std::atoi(range.c_str());
    for (int cpu = first; cpu <= last && cpu < 65536; ++cpu) {
      if (static_cast<int>(list.position.size()) <= cpu) list.position.resize(cpu + 1, -1);
      list.position[cpu] = list.count++;
    }
  }
  return list;
}

}  // namespace

std::string Model::Summary() const {
  char line[512];
  std::snprintf(line, sizeof(line),
                "simnic (simulated EFA-like NIC): %d NICs x %.3g Gbps (%g Gbps / scale %g: a "
                "%g-byte page stands for 64 KiB), tx depth %zu, doorbell %u ns (%.0f ns across "
                "virtual NUMA nodes), CQ poll %u ns, post %u ns, %d virtual NUMA nodes, %d engine "
                "thread(s), efa-direct rules %s",
                nics, line_bps() / 1e9, unscaled_gbps, scale, 65536 / scale, tx_depth, doorbell_ns,
                remote_doorbell_ns(), cq_poll_ns, post_ns, numa_nodes, engine_threads,
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
  uint64_t until = NowNs() + ns;
  while (NowNs() < until) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

int NodeOfCpu(int cpu, int nodes) {
  static const CpuList cpus = ReadOnlineCpus();
  if (cpu < 0 || cpu >= static_cast<int>(cpus.position.size()) || cpus.count == 0) return -1;
  int position = cpus.position[cpu];
  if (position < 0) return -1;
  return static_cast<int>(static_cast<int64_t>(position) * nodes / cpus.count);
}

int NodeOfNic(int nic_index, int nics, int nodes) {
  if (nic_index < 0 || nics <= 0) return -1;
  return static_cast<int>(static_cast<int64_t>(nic_index) * nodes / nics);
}

}  // namespace simnic
