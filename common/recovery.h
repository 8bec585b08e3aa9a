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
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/network.h"
#include "common/node.h"
#include "common/recovery_nic.h"

namespace tutorial {

// How long the server waits for operations in flight once a transfer ends
// or fails; a drain also gives up after a second without any completion.
constexpr double kDrainSeconds = 5.0;

// Makes sure no completion can reach a writer that is gone: sends and
// writes still queued fail with FI_ECANCELED, every NIC is polled until
// nothing is in flight, and whatever the provider still holds after
// `seconds` (or a second without progress) is detached, so its callbacks
// never run. Returns false when something had to be detached.
bool DrainTransmits(Node& node, double seconds);

// Watches a transfer from outside the writer, which only runs its loop: an
// error completion that names no write (how shm 1.17 reports writes into a
// process that died), an error on an endpoint's event queue, or no
// completion on any NIC for `stall_seconds` means the client is gone. The
// writer learns it through the flag (WriteJob::Interrupted()).
class TransferWatch {
 public:
  TransferWatch(Node& node, double stall_seconds);
  ~TransferWatch() { Stop(); }
  TransferWatch(const TransferWatch&) = delete;
  TransferWatch& operator=(const TransferWatch&) = delete;

  // Ends the watch; call once the writer's threads are gone.
  void Stop();

  const std::atomic<bool>* flag() const { return &abandoned_; }
  bool abandoned() const { return abandoned_.load(std::memory_order_acquire); }
  std::string reason() const;

 private:
  template <typename F>
  void ForEachNet(F&& f);
  uint64_t Completions();
  void Abandon(const std::string& reason);
  void Watch();

  Node& node_;
  double stall_seconds_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::atomic<bool> abandoned_{false};
  mutable std::mutex reason_mutex_;
  std::string reason_;
};

// Whether an endpoint reopened in place may take its old address again
// (the front door of a server restarted by its watchdog). tcp: yes
// (fi_setname binds the same port). efa: no, it has no fi_setname and its
// addresses include the QP number. shm: it has fi_setname, but a reused
// name was measured to lose the next client (docs/provider-failures.md,
// point 4).
bool KeepsAddressOnRebuild(const std::string& provider);

// After an abandoned transfer: every endpoint of every group is closed and
// opened again with a new address (registrations stay valid, the domain is
// kept), whatever the provider still holds, so the next client meets no
// state of the last one. The server's front door is not among them.
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

// A server restarted in place by its watchdog finds its front door's old
// address in its environment and takes it back where the provider allows
// (tcp); shm's name is made of the process id, which execve keeps.
void TakeBackAddressAfterRestart(Network& front_door);

}  // namespace tutorial
