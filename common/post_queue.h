// Chapter 18's batches: how a NIC's pending queue goes to the provider with
// FI_MORE, apart from the provider itself so that a test can play the
// provider (tests/post_queue_test.cc). `submit(op, flags)` returns 0 when
// the provider took the op, -FI_EAGAIN when it is busy (the refused op
// stays at the front), or another negative code when the post failed for
// good (the op leaves the queue; the caller has reported it).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <vector>

namespace tutorial {

// Chapter 18: consecutive WRITEs go out as batches flagged FI_MORE, all but
// the last. On EFA a WRITE flagged FI_MORE waits in a host-side queue for
// the next post without it and counts against the transmit queue meanwhile,
// so: no batch is larger than `free_slots` (the transmit queue's free
// entries), and a batch left open (`batch_open`) stays open until the next
// accepted post, which then carries no FI_MORE. A batch is left open when
// the provider cut it short with -FI_EAGAIN, and also when a post failed
// for good: a failed post rings no doorbell, so the WRITEs before it still
// wait for one. `may_batch(op)` tells which operations may travel flagged
// FI_MORE (WRITEs to a peer that has answered; see ConfirmedPeers).
template <typename Op, typename MayBatch, typename Submit>
void PostPendingQueueInBatches(std::deque<Op*>& queue, size_t free_slots, bool& batch_open,
                               MayBatch may_batch, Submit submit) {
  while (!queue.empty()) {
    size_t batch = batch_open ? 1 : std::max<size_t>(1, std::min(queue.size(), free_slots));
    for (size_t i = 0; i < batch; ++i) {
      Op* op = queue.front();
      bool last = i + 1 == batch || !may_batch(op) || !may_batch(queue[1]);
      ssize_t ret = submit(op, last ? uint64_t{0} : uint64_t{FI_MORE});
      if (ret == -FI_EAGAIN) return;
      queue.pop_front();
      if (ret < 0) break;  // failed for good: batch_open stays as it was
      batch_open = !last;
      if (free_slots > 0) --free_slots;
      if (last) break;
    }
  }
}

// Takes the queued sends and writes off `queue` and returns them; receives
// stay. While a batch is open (chapter 18), the NIC holds WRITEs flagged
// FI_MORE that only the next post can ring out, so the first queued
// transmit stays too, and `*closer` names it (else nullptr): giving it up
// would leave those WRITEs without a doorbell for good.
template <typename Op, typename IsTransmit>
std::deque<Op*> TakeQueuedTransmits(std::deque<Op*>& queue, bool batch_open, IsTransmit is_transmit,
                                    Op** closer) {
  std::deque<Op*> kept, taken;
  *closer = nullptr;
  for (Op* op : queue) {
    if (!is_transmit(op)) {
      kept.push_back(op);
    } else if (batch_open && *closer == nullptr) {
      *closer = op;
      kept.push_back(op);
    } else {
      taken.push_back(op);
    }
  }
  queue.swap(kept);
  return taken;
}

// The peers a NIC may send WRITEs flagged FI_MORE to: those from which a
// WRITE of ours has completed. Before its handshake with a peer, efa takes
// up to 16 operations and keeps them in a queue of its own
// (efa_rdm_ep_enforce_handshake_for_txe, prov/efa/src/rdm/efa_rdm_ep_utils.c,
// v2.1 to v2.6); once the handshake arrives, a later CQ read posts them
// again with the flags the application gave (efa_rdm_ope_process_queued_ope,
// efa_domain.c; efa_rdm_pke_write tests the op's FI_MORE), outside any batch
// of ours. If the device's queue fills halfway through those re-posts,
// WRITEs flagged FI_MORE sit there without a doorbell and nothing of ours
// can close them. efa completes a WRITE only after the handshake, so a
// completed WRITE says the peer's re-posts are over: until then every WRITE
// to it goes out alone, without FI_MORE (in practice only the warmup).
class ConfirmedPeers {
 public:
  bool Confirmed(fi_addr_t peer) const { return peer < confirmed_.size() && confirmed_[peer]; }
  void Confirm(fi_addr_t peer) {
    if (peer >= kMaxPeers) return;  // not an AV table index: never batched
    if (peer >= confirmed_.size()) confirmed_.resize(peer + 1, false);
    confirmed_[peer] = true;
  }
  // The address vector slot goes to another peer: it has to answer anew.
  void Forget(fi_addr_t peer) {
    if (peer < confirmed_.size()) confirmed_[peer] = false;
  }
  void Clear() { confirmed_.clear(); }

 private:
  static constexpr fi_addr_t kMaxPeers = 1 << 16;
  std::vector<bool> confirmed_;
};

}  // namespace tutorial
