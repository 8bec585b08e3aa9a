// Recovery for one NIC: what a Network needs only when a peer dies or an
// endpoint must start afresh. None of it is on the path a chapter reads,
// so it lives here, a friend that reaches into the Network, and the
// Network keeps only the hooks that cannot move: the address check in
// AddPeer, and the orphan-error hook in its error completion. Why each
// piece exists (libfabric 1.17's shm and tcp, measured):
// docs/provider-failures.md. What the programs do with it (watch, drain,
// rebuild): common/recovery.h.
#pragma once

#include <rdma/fi_eq.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/network.h"

namespace tutorial {

class Recovery {
 public:
  // Sends and writes still in our queue fail with FI_ECANCELED, reported by
  // the next PollCompletion(). Receives stay queued, and so does the post
  // that closes a batch left open with FI_MORE (chapter 18).
  static void CancelQueuedTransmits(Network& net);
  // Forgets every send and write not yet completed, without calling back:
  // queued ones at once; those the provider holds are detached (their
  // contexts stay allocated until the provider lets go, or the endpoint is
  // reset). Returns how many the provider still holds.
  static size_t DetachTransmits(Network& net);
  // Sends and writes not yet completed stay where they are (queued, failed
  // or with the provider) and still count as in flight, but their
  // completions call nobody back.
  static void SilenceTransmits(Network& net);
  static size_t Detached(const Network& net) { return net.detached_; }
  // True when the provider still holds detached operations or the address
  // vector refused an insert: only ResetEndpoint() makes the NIC whole.
  static bool NeedsReset(const Network& net) {
    return net.detached_ > 0 || net.av_damaged_ || net.reset_wanted_;
  }
  // Makes NeedsReset() true until the next reset (an event queue error).
  static void WantReset(Network& net) { net.reset_wanted_ = true; }

  // Closes the endpoint, its completion queue and address vector, and
  // opens new ones on the same domain, so registrations stay valid. Every
  // operation is forgotten without a callback (posted receives too: post
  // them again) and every peer is gone. With `keep_address` the endpoint
  // takes its old address again (fi_setname) and RuntimeError is thrown
  // when the provider cannot.
  static void ResetEndpoint(Network& net, bool keep_address);
  // The same, taking `address` (a restarted server takes back the address
  // its clients know). Throws RuntimeError when the provider cannot.
  static void ReopenAt(Network& net, const std::vector<uint8_t>& address);
  // Closes the endpoint, completion queue and address vector now, before
  // memory registered with them is freed; the domain stays for the
  // registrations still open. Nothing may be posted afterwards.
  static void CloseEndpoint(Network& net) { net.CloseEndpoint(); }

  // Throws RuntimeError when `address` is not one this provider can insert
  // (wrong length or family, not a destination, not NUL-terminated; for
  // shm, an endpoint or process that does not exist).
  static void CheckPeerAddress(const Network& net, const std::vector<uint8_t>& address);

  // Runs `callback` on the polling thread for an error completion that
  // names no operation of ours (shm 1.17's failed write into a dead
  // process); an empty callback removes the hook.
  static void OnOrphanError(Network& net, OrphanErrorCallback callback) {
    net.on_orphan_error_ = std::move(callback);
  }
  // Sends and writes completed so far, errors included (receives do not
  // count, so a flood of messages cannot hide a transfer that stopped).
  // Safe to read from any thread: a watch's view of progress.
  static uint64_t TransmitCompletions(const Network& net) {
    return net.transmit_completions_.load(std::memory_order_relaxed);
  }

  // The provider's asynchronous errors (the endpoint's event queue): "" when
  // there are none, else one line. Safe to call from a watching thread.
  static std::string TakeEventError(Network& net);
  // The endpoint's event queue, for tests that play the provider's part.
  static fid_eq* EventQueueForTesting(Network& net) { return net.eq_.get(); }

 private:
  // Pins glibc's mmap threshold before the first endpoint closes (why:
  // recovery_nic.cc).
  static void KeepLargeBlocksMapped();
  // Closes the endpoint and opens a new one (at `address` when given).
  static void Reopen(Network& net, const std::vector<uint8_t>* address);
};

}  // namespace tutorial
