// Chapter 18's posting: consecutive queued WRITEs go out flagged FI_MORE,
// all but the last of each batch, so the NIC's doorbell rings once per
// batch instead of once per WRITE (EFA honours FI_MORE on RMA writes from
// libfabric 1.22). The rules every batch follows, and why: post_queue.h.
#pragma once

#include "common/op_pool.h"
#include "common/post_queue.h"

namespace tutorial {

// Chapter 17's pooled operations, posted in batches.
class MoreNetwork : public PooledNetwork {
 public:
  using PooledNetwork::PooledNetwork;

  // The last accepted post carried FI_MORE: the NIC holds WRITEs that only
  // the next post rings out.
  bool batch_open() const { return batch_open_; }

  void RemovePeer(fi_addr_t peer) override {
    confirmed_peers_.Forget(peer);
    PooledNetwork::RemovePeer(peer);
  }
  void CloseEndpoint() override {
    PooledNetwork::CloseEndpoint();
    batch_open_ = false;
    confirmed_peers_.Clear();
  }

 protected:
  void ProgressPendingOps() override {
    size_t free_slots = tx_depth_ > posted_transmits ? tx_depth_ - posted_transmits : 0;
    PostPendingQueueInBatches(
        pending_ops, free_slots, batch_open_,
        [this](const RdmaOp* op) {
          return op->type == OpType::kWrite && confirmed_peers_.Confirmed(op->write.peer);
        },
        [this](RdmaOp* op, uint64_t flags) { return Post(op, flags); });
  }

  void Complete(RdmaOp* op) override {
    // The peer answered; WRITEs to it may carry FI_MORE now.
    if (op->type == OpType::kWrite && op->ok()) confirmed_peers_.Confirm(op->write.peer);
    PooledNetwork::Complete(op);
  }

 private:
  bool batch_open_ = false;
  ConfirmedPeers confirmed_peers_;
};

}  // namespace tutorial
