// The model's parameters (each an environment variable SIMNIC_*, read once
// per process) and the CPU costs it charges the threads that post and poll.
// docs/simnic.md says why each default is what it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace simnic {

struct Model {
  // NICs: one domain (and one RDM endpoint each) per simulated NIC.
  int nics = 32;               // SIMNIC_NICS: the p5 has 32 EFA NICs
  double unscaled_gbps = 100;  // SIMNIC_LINE_GBPS: one p5 EFA NIC
  double scale = 256;          // SIMNIC_SCALE: line rate and page size divided by this
  size_t tx_depth = 4096;      // SIMNIC_TX_DEPTH: EFA's tx_attr->size on a p5
  size_t rx_depth = 8192;      // SIMNIC_RX_DEPTH: EFA's rx_attr->size on a p5
  size_t cq_entries = 16384;   // SIMNIC_CQ_ENTRIES: completion ring per CQ
  // Costs on the posting and polling CPU (busy waits).
  // The three CPU costs come from the series' own p5 rates (docs/simnic.md,
  // "Where the costs come from"): chapters 13 -> 14 differ only in CQ reads
  // per WRITE, which gives about 0.3 us per fi_cq_read and 1.55 us per
  // WRITE besides; less what our program and the simulator already spend
  // per WRITE (measured), 1.0 us is left to simulate per post.
  uint32_t doorbell_ns = 300;     // SIMNIC_DOORBELL_NS: uncached MMIO write, same node
  double remote_numa_factor = 3;  // SIMNIC_REMOTE_NUMA_FACTOR: doorbell across nodes
  uint32_t post_ns = 700;         // SIMNIC_POST_NS: the provider's software post path
  uint32_t cq_poll_ns = 300;      // SIMNIC_CQ_POLL_NS: one fi_cq_read (a DMA'd line)
  int numa_nodes = 2;             // SIMNIC_NUMA_NODES: virtual NUMA nodes, as a p5
  // Rules.
  bool direct = false;           // SIMNIC_DIRECT: efa-direct's AV rule and MTU
  size_t mtu = 8192;             // efa-direct refuses larger messages
  size_t max_send = 256 * 1024;  // largest message without the MTU rule
  // The data path.
  int engine_threads = 2;       // SIMNIC_ENGINE_THREADS: per process
  size_t ring_bytes = 1 << 20;  // SIMNIC_RING_BYTES: inbound ring per initiator
  int ring_slots = 16;          // SIMNIC_RING_SLOTS: initiators per endpoint
  uint32_t peer_check_ms = 50;  // how often dead peers are looked for

  // Line rate of one NIC in bits per second, after scaling.
  double line_bps() const { return unscaled_gbps * 1e9 / scale; }
  double remote_doorbell_ns() const { return doorbell_ns * remote_numa_factor; }
  // One line, labelled simulated, for the result lines of the programs.
  std::string Summary() const;
};

// The process's model, read from the environment on first use.
const Model& GetModel();
// Reads the environment again (tests change it between cases).
void ReloadModel();

// Nanoseconds on a monotonic clock.
uint64_t NowNs();
// Busy-waits for `ns` nanoseconds: the CPU stays busy, as it does while an
// uncached write or a cache miss stalls it.
void SpinFor(uint64_t ns);

// Virtual NUMA node of a CPU (its share of the online CPU list) and of a NIC
// (its share of the domain indices); -1 when unknown.
int NodeOfCpu(int cpu, int nodes);
int NodeOfNic(int nic_index, int nics, int nodes);

}  // namespace simnic
