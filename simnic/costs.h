// simnic's frozen costs: each number, the rule that gives it and the rule's
// inputs, in one place. The model's defaults (model.h) are these; an
// environment variable (SIMNIC_*) may override one for an experiment, never
// the recorded ladder. docs/simnic.md prints this table, and its check reads
// every line of the form
//   inline constexpr <type> k<Name> = <number>;  // SIMNIC_<VAR>: <rule>
// so keep one constant a line, a plain number, and the rule after it.
//
// Inputs of the derived rules:
//  - the series' time per WRITE of a writer thread on the p5 (threads /
//    M WRITEs/s of its ladder): 12 3.39 us, 13 2.75 us, 14 1.62 us, 11 11.8 us;
//  - our program's calls per WRITE where its thread is limited by its CPU
//    alone (one group of 4 NICs, 128-byte pages, the H100 16-core recording
//    of 2026-11-28 under taskset -c 0-3): CQ reads per WRITE 4.992 in 13 and
//    0.597 in 14, one post and one doorbell per WRITE in both;
//  - our program's own time per WRITE in 14 there (outside provider calls):
//    89 ns.
// Nothing here was set to meet a bound; tools/simnic_fit.py --refit is the
// published experiment that fits costs to recordings, beside this model.
#pragma once

#include <cstdint>

namespace simnic::costs {

// The line and its scale.
inline constexpr double kLineGbps = 100;    // SIMNIC_LINE_GBPS: one p5 EFA NIC (published)
inline constexpr double kScale = 256;       // SIMNIC_SCALE: 64 KiB / 256 = 256-byte pages keep
                                            // the p5's 6.1 M WRITEs/s at 1/256 of its bytes
inline constexpr uint32_t kTxDepth = 4096;  // SIMNIC_TX_DEPTH: EFA's tx_attr->size on a p5
inline constexpr uint32_t kRxDepth = 8192;  // SIMNIC_RX_DEPTH: EFA's rx_attr->size on a p5

// The fixed cost of one fi_cq_read. Rule: the series' step 13 -> 14 changed
// only how many CQ reads a WRITE takes (14 posts 16 WRITEs a visit); its
// time saved over the reads removed: (2750 - 1620) / (4.992 - 0.597) ns.
inline constexpr uint32_t kCqPollNs = 257;  // SIMNIC_CQ_POLL_NS: series 13->14 / CQ reads removed

// Declared, not derived (no published figure separates a doorbell or an
// entry from the rest of a post): an uncached MMIO write, and one 64-byte
// line the NIC wrote. Every chapter up to 17 rings one doorbell and reads
// one entry per WRITE, so only 18's gain depends on how a post splits.
inline constexpr uint32_t kDoorbellNs = 200;  // SIMNIC_DOORBELL_NS: declared (uncached MMIO)
inline constexpr uint32_t kCqEntryNs = 40;    // SIMNIC_CQ_ENTRY_NS: declared (a line the NIC wrote)

// The provider's software path per post. Rule: the series' 14 (pinned, its
// CPU the limit) less our program's own time, its CQ reads and the declared
// doorbell and entry: 1620 - 89 - 0.597 * 257 - 200 - 40 ns.
inline constexpr uint32_t kPostNs = 1138;  // SIMNIC_POST_NS: series 14 less the rest of a WRITE

// The other socket. Declared: a line that crosses a two-socket Xeon's link
// costs about three times one that stays (the doorbell, the entries; a lock
// line). The post path runs in the caller's cache and is not multiplied.
inline constexpr double kRemoteNumaFactor = 3;  // SIMNIC_REMOTE_NUMA_FACTOR: declared

// The simulated p5 scheduler: a busy unpinned thread is moved about every
// kMigrateUs while the balancer has more of them than a socket's cores, and
// refills its cache after each move. kMigrateUs is declared; the refill is
// derived. Rule: the series' 11 is its 12 plus what an unpinned thread
// pays from the other socket half the time ((3 - 1) / 2 x (doorbell +
// entry)), stretched by the share rho of its time the moves take:
// 11.8 us = (3.39 + 0.24) us / (1 - rho), rho = 0.6924, refill = rho x 400 us (276949 ns).
inline constexpr double kMigrateUs = 400;      // SIMNIC_MIGRATE_US: declared
inline constexpr uint32_t kRefillNs = 276949;  // SIMNIC_REFILL_NS: series 11 over 12, rho x gap

// Declared: EFA's handshake and address handle at a NIC's first WRITE into
// a remote region (warmup's lesson), and an FI_THREAD_SAFE lock's line
// moving to another core.
inline constexpr uint32_t kFirstContactNs = 200000;  // SIMNIC_FIRST_CONTACT_NS: declared
inline constexpr uint32_t kLockLineNs = 150;         // SIMNIC_LOCK_LINE_NS: declared

// The p5's two sockets.
inline constexpr int kNumaNodes = 2;  // SIMNIC_NUMA_NODES: a p5's sockets

}  // namespace simnic::costs
