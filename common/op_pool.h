// Chapter 17's operation contexts: taken from a pool that never shrinks
// and reused, each completed through one handler object (the writer)
// instead of a std::function of its own: no heap allocation and no
// std::function per operation once the pool is warm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/network.h"

namespace tutorial {

// One object handles every completion, told apart by RdmaOp::user.
class CompletionHandler {
 public:
  virtual void OnCompletion(Network& net, RdmaOp& op) = 0;

 protected:
  ~CompletionHandler() = default;
};

class PooledNetwork : public Network {
 public:
  using Network::Network;

  // A WRITE context from the pool, completed through `handler` with
  // op.user = user; the caller queues it (pending_ops).
  RdmaOp* NewWriteOp(const RdmaWrite& write, CompletionHandler* handler, uint64_t user) {
    RdmaOp* op = NewOp(OpType::kWrite, nullptr);
    static_cast<PooledOp*>(op)->handler = handler;
    op->user = user;
    op->write = write;
    return op;
  }

 protected:
  struct PooledOp : RdmaOp {
    CompletionHandler* handler = nullptr;
  };
  static constexpr size_t kChunk = 1024;

  RdmaOp* AllocateOp(bool& from_heap) override {
    from_heap = free_.empty();
    if (free_.empty()) {
      chunks_.emplace_back(new PooledOp[kChunk]);
      for (size_t i = 0; i < kChunk; ++i) free_.push_back(&chunks_.back()[i]);
    }
    PooledOp* op = free_.back();
    free_.pop_back();
    op->error = 0;
    op->received = 0;
    op->user = 0;
    op->posted = false;
    op->handler = nullptr;
    return op;
  }

  void ReleaseOp(RdmaOp* op) override {
    op->callback = nullptr;
    if (!op->error_message.empty()) op->error_message.clear();
    free_.push_back(static_cast<PooledOp*>(op));
  }

  void Complete(RdmaOp* op) override {
    CompletionHandler* handler = static_cast<PooledOp*>(op)->handler;
    if (handler != nullptr) return handler->OnCompletion(*this, *op);
    Network::Complete(op);  // sends and receives keep their callbacks
  }

 private:
  // Chunks never move: the provider holds pointers into them.
  std::vector<std::unique_ptr<PooledOp[]>> chunks_;
  std::vector<PooledOp*> free_;
};

}  // namespace tutorial
