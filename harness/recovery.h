// What the programs do when a peer dies: none of it is a chapter's idea,
// so it lives here, apart from Network and the server's transfer loop.
//
// The parts: a TransferWatch notices that a client is gone; DrainTransmits
// gives back or detaches every operation still in flight, so no completion
// can reach a writer that is gone; RebuildNetworks gives every endpoint a
// fresh start; a few provider-specific guards keep libfabric 1.17's shm
// from crashing on a peer that vanished.
//
// What libfabric 1.17's shm leaves behind when a peer dies, and so why each
// guard here exists (points 1-4): docs/provider-failures.md.
//
// Two shm bugs crash a process from inside libfabric (both a NULL peer
// region, `ep->region->map->peers[i].region`; details and history in
// docs/provider-failures.md, points 5 and 6):
//  A. smr_progress_iov() (1.17 smr_progress.c:346; 2.1 :315): a command
//     carrying a stale peer id. smr_av_remove() never resets the endpoint's
//     own `addr.id` of the slot, the next fi_av_insert reuses the slot (1.17
//     at once, 2.x after 256 inserts) and smr_verify_peer() skips the name
//     exchange. Guard: fi_av_remove is never followed by an insert on one
//     data endpoint: every transfer ends with fresh endpoints
//     (RebuildNetworks).
//  B. smr_progress_connreq() (1.17 smr_progress.c:773; 2.x returns early but
//     never answers the sender): a queued name ("connreq") whose sender's
//     /dev/shm file is gone (smr_map_add() turns ENOENT into success with a
//     NULL region). Guards: SIGINT/SIGTERM held while endpoints open
//     (StopSignalsHeld; shm's own handler unlinks the files at once), a
//     client stopped before CONNECT sends nothing, the front door answered
//     all the time (BusyAnswerer), and a dead process's files removed only
//     once every name it sent was taken (StaleFileSweeper).
// Should either still fire, InstallCrashGuard's handler (harness/main_guard.h)
// names both in one line and the process ends with exit code 3, for a
// supervisor to start it again.
//
// A dead peer is known sooner than the 10 s stall where the provider can
// tell: shm names the peer's process (PeerKnownDead, checked by
// TransferWatch), tcp fails the writes of a connection the peer's kernel
// reset, and a client stopped by SIGINT/SIGTERM says so (CANCEL). efa gives
// no sign of a dead peer (no connections): there the stall decides.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/messages.h"
#include "common/network.h"
#include "common/node.h"
#include "harness/recovery_nic.h"

namespace tutorial {

// How long the server waits for operations in flight once a transfer ends
// or fails; a drain also gives up after a second without any completion.
constexpr double kDrainSeconds = 5.0;

// Makes sure no completion can reach a writer that is gone: the callbacks
// of every send and write not yet completed are dropped, those still
// queued fail with FI_ECANCELED (silently), every NIC is polled until
// nothing is in flight, and whatever the provider still holds after
// `seconds` (or a second without progress) is detached. Returns false when
// something had to be detached.
bool DrainTransmits(Node& node, double seconds);

// Watches a transfer from outside the writer, which only runs its loop: an
// error completion that names no write (how shm 1.17 reports writes into a
// process that died), an error on an endpoint's event queue, or no
// completion on any NIC for `stall_seconds` means the client is gone. The
// writer learns it through the flag (WriteJob::Interrupted()).
class TransferWatch {
 public:
  // `client`: the client's NIC 0 address; where the provider's addresses
  // name a process (shm), a client whose process is gone is known at once.
  TransferWatch(Node& node, double stall_seconds, std::vector<uint8_t> client = {});
  ~TransferWatch() { Stop(); }
  TransferWatch(const TransferWatch&) = delete;
  TransferWatch& operator=(const TransferWatch&) = delete;

  // Ends the watch; call once the writer's threads are gone.
  void Stop();

  // Ends the transfer from outside (the first reason given wins).
  void Abandon(const std::string& reason);

  const std::atomic<bool>* flag() const { return &abandoned_; }
  bool abandoned() const { return abandoned_.load(std::memory_order_acquire); }
  std::string reason() const;

 private:
  template <typename F>
  void ForEachNet(F&& f);
  uint64_t Completions();
  void Watch();

  // Each NIC's counters when the watch began, and the NICs that took more
  // WRITEs since than they completed (for the stall message).
  std::string CountsSinceStart();

  Node& node_;
  double stall_seconds_;
  std::vector<uint8_t> client_;
  std::vector<NetworkCounters> start_counts_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::atomic<bool> abandoned_{false};
  mutable std::mutex reason_mutex_;
  std::string reason_;
};

// Whether an endpoint reopened in place may take its old address again
// (the server's front door, rebuilt after an error). tcp: yes
// (fi_setname binds the same port). shm: yes (fi_setname before fi_enable
// names the new shared-memory file; the old one is unlinked at close), for
// peers that map the name afterwards: a peer that mapped it before keeps
// talking to the old region (docs/provider-failures.md, point 7). efa: no,
// it has no fi_setname and its addresses include the QP number.
bool KeepsAddressOnRebuild(const std::string& provider);

// How long the front door must hear nothing after a flood before it is
// rebuilt, so that what the provider took in during the flood goes back
// with the old endpoint; 0 where it is never rebuilt for that. `provider`
// is the endpoint's own (fabric_attr->prov_name). tcp;ofi_rxm (tcp on 1.x)
// keeps its grown pools: 0.5 s. shm on libfabric 2.x (a context for every
// unmatched message, from a pool without a limit): longer than any waiting
// client stays silent (its longest pause after BUSY), because a client that
// mapped the old name before the rebuild never reaches the new one. shm on
// 1.x keeps a flood's memory bounded: never. tcp on 2.x (its own RDM
// endpoint) keeps a flood's memory flat, and closing it while a peer's
// connection is half made crashes the process at the next progress
// (docs/provider-failures.md): never.
double FloodOverSeconds(const std::string& provider);

// After an abandoned transfer: every endpoint of every group is closed and
// opened again with a new address (registrations stay valid, the domain is
// kept; where a closed endpoint endangers its domain, tcp on libfabric 2.x,
// the domain is new and the buffers are registered again), whatever the
// provider still holds, so the next client meets no state of the last one.
// The server's front door is not among them.
// Returns a note for the one-line report ("; rebuilt ...").
std::string RebuildNetworks(Node& node);

// The process that owns `address`, when the provider's addresses say
// (shm names are "fi_shm://<pid>:<uid>:<index>"); 0 when they do not.
int PeerProcess(const Network& net, const std::vector<uint8_t>& address);
// True only when `address` is known to belong to a process that is gone
// (shm); false when alive or unknown (tcp, efa: the deadline tells).
bool PeerKnownDead(const Network& net, const std::vector<uint8_t>& address);
// shm: removes the shared-memory files of every endpoint of the processes
// of `peers` that are gone (one killed with SIGKILL leaves them). Other
// providers keep no files.
void RemoveFilesOfDeadPeers(const Network& net, const std::vector<std::vector<uint8_t>>& peers);

// Runs `tend` over and over on a thread of its own until destroyed,
// pausing kBusyAnswererNap whenever it handled nothing: the server's front
// door stays answered (BUSY) while the main loop transfers or recovers
// (bug B: a client whose name waits unread gives up, its file goes, and
// 1.17 crashes at the read). `tend` must be the only user of what it polls.
constexpr std::chrono::milliseconds kBusyAnswererNap{20};
class BusyAnswerer {
 public:
  explicit BusyAnswerer(std::function<size_t()> tend);
  ~BusyAnswerer();
  BusyAnswerer(const BusyAnswerer&) = delete;
  BusyAnswerer& operator=(const BusyAnswerer&) = delete;

 private:
  std::function<size_t()> tend_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// shm: removes the /dev/shm files of processes of this user that died
// (SIGKILL leaves them), including clients killed before they said who they
// are. Only safe once every name such a process sent was taken (bug B): call
// Sweep() right after a poll of the front door; a file is removed only when
// its process has been seen dead for a second, long enough for any
// live peer that polls (ours always do) to have read the name. Sweeps at
// most once a second; does nothing for other providers.
class StaleFileSweeper {
 public:
  explicit StaleFileSweeper(const Network& front_door) : front_door_(front_door) {}
  void Sweep();

 private:
  const Network& front_door_;
  std::chrono::steady_clock::time_point next_sweep_{};
  std::map<std::string, std::chrono::steady_clock::time_point> seen_dead_;
};

// Holds SIGINT and SIGTERM while alive (construct it before any thread
// starts, around the code that opens endpoints): shm installs its own
// handler at its first endpoint, which unlinks our files at once (bug B).
// On destruction our handlers take the signals back, then a pending one is
// delivered to them.
class StopSignalsHeld {
 public:
  StopSignalsHeld();
  ~StopSignalsHeld();
  StopSignalsHeld(const StopSignalsHeld&) = delete;
  StopSignalsHeld& operator=(const StopSignalsHeld&) = delete;
};

}  // namespace tutorial
