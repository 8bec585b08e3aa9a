// The model's parameters (each an environment variable SIMNIC_*, read once
// per process) and the CPU costs it charges the threads that post and poll.
// docs/simnic.md says why each default is what it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "simnic/costs.h"

namespace simnic {

struct Model {
  // NICs: one domain (and one RDM endpoint each) per simulated NIC.
  int nics = 32;                            // SIMNIC_NICS: the p5 has 32 EFA NICs
  double unscaled_gbps = costs::kLineGbps;  // SIMNIC_LINE_GBPS
  double scale = costs::kScale;             // SIMNIC_SCALE: line rate and page size divided by this
  size_t tx_depth = costs::kTxDepth;        // SIMNIC_TX_DEPTH
  size_t rx_depth = costs::kRxDepth;        // SIMNIC_RX_DEPTH
  size_t cq_entries = 16384;                // SIMNIC_CQ_ENTRIES: completion ring per CQ
  // Costs on the posting and polling CPU (busy waits), each a mechanism of
  // a NIC or a CPU, never a chapter's. The defaults are the frozen costs of
  // simnic/costs.h, where each one's rule and inputs are. A call's charges
  // are its whole length: simnic's own work runs inside them (the call
  // spins until it has taken what it charged).
  uint32_t post_ns = costs::kPostNs;                     // SIMNIC_POST_NS: software path per post
  uint32_t doorbell_ns = costs::kDoorbellNs;             // SIMNIC_DOORBELL_NS: uncached MMIO write
  double remote_numa_factor = costs::kRemoteNumaFactor;  // SIMNIC_REMOTE_NUMA_FACTOR: what
                                                         // crosses the socket link: the
                                                         // doorbell, the completions the NIC
                                                         // wrote
  uint32_t cq_poll_ns = costs::kCqPollNs;    // SIMNIC_CQ_POLL_NS: one fi_cq_read (an unchanged
                                             // ring line stays in the reader's cache)
  uint32_t cq_entry_ns = costs::kCqEntryNs;  // SIMNIC_CQ_ENTRY_NS: each completion returned
  uint32_t first_contact_ns = costs::kFirstContactNs;  // SIMNIC_FIRST_CONTACT_NS: first WRITE
                                                       // of a NIC into a remote region
  uint32_t lock_line_ns = costs::kLockLineNs;  // SIMNIC_LOCK_LINE_NS: an FI_THREAD_SAFE lock
                                               // last taken by another thread
  int numa_nodes = costs::kNumaNodes;          // SIMNIC_NUMA_NODES: virtual sockets, as a p5
  // NICs of one group (one GPU's): a group's NICs share a virtual socket.
  int nics_per_group = 1;  // SIMNIC_NICS_PER_GROUP (the tools set the layout's)
  // The p5's scheduler, simulated for a thread whose affinity spans both
  // virtual sockets (an unpinned thread): it runs on a socket; while the
  // process's busy unpinned threads fit on one virtual socket's cores it
  // stays there, and once they outnumber them the balancer moves each busy
  // one now and then (to either socket), and it refills its cache after
  // each move.
  double migrate_us = costs::kMigrateUs;  // SIMNIC_MIGRATE_US: mean time between moves
  uint32_t refill_ns = costs::kRefillNs;  // SIMNIC_REFILL_NS: cold cache after a move
  // Virtual socket of each CPU the process may use (-1: not in its mask),
  // read once when the model is (the main thread, at fi_getinfo).
  std::vector<int16_t> cpu_socket;
  int mask_cores = 0;
  // Rules.
  bool direct = false;           // SIMNIC_DIRECT: efa-direct's AV rule and MTU
  size_t mtu = 8192;             // efa-direct refuses larger messages
  size_t max_send = 256 * 1024;  // largest message without the MTU rule
  // The data path.
  int engine_threads = 2;        // SIMNIC_ENGINE_THREADS: per process
  std::vector<int> engine_cpus;  // SIMNIC_ENGINE_CPUS ("0,2,4-6"): where engine threads may
                                 // run (the tools keep them off the writers' cores)
  size_t ring_bytes = 1 << 20;   // SIMNIC_RING_BYTES: inbound ring per initiator
  int ring_slots = 16;           // SIMNIC_RING_SLOTS: initiators per endpoint
  uint32_t peer_check_ms = 50;   // how often dead peers are looked for

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
// Busy-waits until the monotonic clock reads `until_ns`; returns its last
// reading.
uint64_t SpinUntil(uint64_t until_ns);

// Virtual socket of a CPU (the process's affinity mask, in the order hwloc
// lists cores, SMT siblings together, cut into `numa_nodes` equal parts) and
// of a NIC (its group's share of the groups: groups 0-3 of 8 on socket 0,
// a group's NICs on one socket whatever the count); -1 when unknown.
int NodeOfCpu(const Model& m, int cpu);
int NodeOfNic(int nic_index, int nics, int nodes, int nics_per_group = 1);

// Where the calling thread runs, for the costs of one provider call: its
// virtual socket, and the cold-cache refill it owes (ns, once per move).
// A thread pinned within one virtual socket runs where the kernel put it;
// a thread whose affinity spans both is placed by the simulated p5
// scheduler, which moves it (Model::migrate_us, refill_ns) only while it is
// busy and the process's busy unpinned threads outnumber one virtual
// socket's cores: a balancer has something to balance. A thread is busy
// when it has called simnic with gaps under 100 us for 1 ms or more (a
// helper that wakes every few milliseconds is not). The affinity is read again
// every few thousand calls (a thread may pin itself at any time).
struct Placement {
  int socket;
  uint64_t refill_ns;
  bool simulated;  // placed by the simulated scheduler
};
Placement PlaceThisThread(const Model& m, uint64_t now_ns);
// The end of this thread's provider call (for its busy time).
void EndOfCallOnThisThread(uint64_t now_ns);
// The process's busy unpinned threads now (what the balancer sees).
int BusyUnpinnedThreads(uint64_t now_ns);
// Test hook: forget this thread's placement (its affinity is read again).
void ForgetThisThreadsPlacement();

}  // namespace simnic
