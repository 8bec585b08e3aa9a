// Recovery for one NIC, and what watches it: a NicHarness attaches to a
// Network as its hooks (common/network.h) and holds everything the lesson
// does not need: the call meter, the operations nobody waits for any more,
// an address vector that refused an insert, the transfer watch's view of
// progress. Recovery's functions act on a Network through its public state
// and its harness. Why each piece exists (libfabric 1.17's shm and tcp,
// measured): docs/provider-failures.md. What the programs do with it
// (watch, drain, rebuild): harness/recovery.h.
#pragma once

#include <rdma/fi_eq.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/network.h"
#include "harness/call_meter.h"

namespace tutorial {

// Called for an error completion that names no operation of ours.
using OrphanErrorCallback = std::function<void(Network&, const std::string& error)>;

// Attaches itself to `net` (net.hooks) for its lifetime, which must cover
// the Network's use. Aligned to a cache line, as Network is: its counters are
// written on every post and completion by the thread that owns the NIC, and
// the NICs of two writer threads must not share a line.
class alignas(64) NicHarness final : public NetworkHooks {
 public:
  explicit NicHarness(Network& net) : net_(net) { net_.hooks = this; }
  ~NicHarness() override {
    if (net_.hooks == this) net_.hooks = nullptr;
  }
  NicHarness(const NicHarness&) = delete;
  NicHarness& operator=(const NicHarness&) = delete;

  // The harness of `net` (attached when the Network was made).
  static NicHarness& Of(Network& net);
  static const NicHarness& Of(const Network& net);

  CallMeter& meter() { return meter_; }
  const CallMeter& meter() const { return meter_; }

  void EnterProvider(ProviderCall call) override { call_start_ = meter_.Begin(call); }
  void LeaveProvider(ProviderCall call, ssize_t ret, uint64_t flags) override {
    meter_.End(call, flags, ret, call_start_);
  }
  void HeldBack() override { meter_.Refused(); }
  void Queued(const RdmaOp& op, bool allocated) override {
    meter_.OpCreated(op.type == OpType::kWrite, allocated);
  }
  bool Deliver(RdmaOp& op) override;
  void ErrorWithoutOp(Network& net, const std::string& error) override {
    if (on_orphan_error_) on_orphan_error_(net, error);
  }
  void CheckPeerAddress(const Network& net, const std::vector<uint8_t>& address) override;
  void AddressVectorRefused(Network&) override { av_damaged_ = true; }

 private:
  friend class Recovery;
  // Forgets every operation it was told about (the endpoint was closed).
  void Forget() {
    silenced_.clear();
    detached_.clear();
  }

  Network& net_;
  CallMeter meter_;
  uint64_t call_start_ = 0;
  // Operations whose completion calls nobody back; of them, those the
  // provider held when they were detached (no longer counted in flight).
  std::unordered_set<const RdmaOp*> silenced_;
  std::unordered_set<const RdmaOp*> detached_;
  bool av_damaged_ = false;
  bool reset_wanted_ = false;  // its event queue reported an error
  OrphanErrorCallback on_orphan_error_;
  // Transmits completed (the transfer watch's view of progress: one
  // writer, readers anywhere).
  std::atomic<uint64_t> transmit_completions_{0};
};

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
  static size_t Detached(const Network& net) { return NicHarness::Of(net).detached_.size(); }
  // True when the provider still holds detached operations or the address
  // vector refused an insert: only ResetEndpoint() makes the NIC whole.
  static bool NeedsReset(const Network& net) {
    const NicHarness& h = NicHarness::Of(net);
    return !h.detached_.empty() || h.av_damaged_ || h.reset_wanted_;
  }
  // Makes NeedsReset() true until the next reset (an event queue error).
  static void WantReset(Network& net) { NicHarness::Of(net).reset_wanted_ = true; }

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
  // True where a closed endpoint leaves work behind in its domain that can
  // crash the process: tcp's own RDM endpoint on libfabric 2.x (a
  // connection accepted and not yet read keeps pointing at the freed
  // listener; docs/provider-failures.md). There ResetDomain() is the safe
  // reset.
  static bool ClosedEndpointsEndangerDomain(const Network& net);
  // ResetEndpoint() with a new domain: every registration on `net` must be
  // closed first (Node::RegisterAgain) and made again afterwards.
  static void ResetDomain(Network& net, bool keep_address);
  // Closes the endpoint, completion queue and address vector now, before
  // memory registered with them is freed; the domain stays for the
  // registrations still open. Nothing may be posted afterwards.
  static void CloseEndpoint(Network& net) {
    net.CloseEndpoint();
    if (net.hooks != nullptr) NicHarness::Of(net).Forget();
  }

  // Throws RuntimeError when `address` is not one this provider can insert
  // (wrong length or family, not a destination, not NUL-terminated; for
  // shm, an endpoint or process that does not exist).
  static void CheckPeerAddress(const Network& net, const std::vector<uint8_t>& address);

  // Runs `callback` on the polling thread for an error completion that
  // names no operation of ours (shm 1.17's failed write into a dead
  // process); an empty callback removes the hook.
  static void OnOrphanError(Network& net, OrphanErrorCallback callback) {
    NicHarness::Of(net).on_orphan_error_ = std::move(callback);
  }
  // Sends and writes completed so far, errors included (receives do not
  // count, so a flood of messages cannot hide a transfer that stopped).
  // Safe to read from any thread: a watch's view of progress.
  static uint64_t TransmitCompletions(const Network& net) {
    return NicHarness::Of(net).transmit_completions_.load(std::memory_order_relaxed);
  }

  // The provider's asynchronous errors (the endpoint's event queue): "" when
  // there are none, else one line. Safe to call from a watching thread.
  static std::string TakeEventError(Network& net);
  // The endpoint's event queue, for tests that play the provider's part.
  static fid_eq* EventQueueForTesting(Network& net) { return net.event_queue(); }

 private:
  // Pins glibc's mmap threshold before the first endpoint closes (why:
  // recovery_nic.cc).
  static void KeepLargeBlocksMapped();
  // Closes the endpoint and opens a new one (at `address` when given).
  static void Reopen(Network& net, const std::vector<uint8_t>* address);
};

}  // namespace tutorial
