// How a NIC's pending queue goes to the provider, apart from the provider
// itself so that a test can play the provider (tests/post_queue_test.cc).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstddef>
#include <deque>

namespace tutorial {

// Chapter 18: consecutive WRITEs go out as batches flagged FI_MORE, all but
// the last. On EFA a WRITE flagged FI_MORE waits in a host-side queue for
// the next post without it and counts against the transmit queue meanwhile,
// so: no batch is larger than `free_slots` (the transmit queue's free
// entries), and a batch the provider cut short with -FI_EAGAIN stays open
// (`batch_open`) until the next accepted post, which then carries no
// FI_MORE.
template <typename Op, typename IsWrite, typename Submit>
void PostPendingQueueInBatches(std::deque<Op*>& queue, size_t free_slots, bool& batch_open,
                               IsWrite is_write, Submit submit) {
  while (!queue.empty()) {
    size_t batch = batch_open ? 1 : std::max<size_t>(1, std::min(queue.size(), free_slots));
    for (size_t i = 0; i < batch; ++i) {
      Op* op = queue.front();
      bool last = i + 1 == batch || !is_write(op) || !is_write(queue[1]);
      if (submit(op, last ? uint64_t{0} : uint64_t{FI_MORE}) == -FI_EAGAIN) return;
      queue.pop_front();
      batch_open = !last;
      if (free_slots > 0) --free_slots;
      if (last) break;
    }
  }
}

// Posts `queue` in order through `submit(op, flags)`, which returns 0 when
// the provider took the op (or failed it for good) and -FI_EAGAIN when it
// is busy; the refused op stays at the front. The series: every post rings
// the doorbell (flags 0). With `batching`, chapter 18's way (above);
// `is_write(op)` tells WRITEs from other operations.
template <typename Op, typename IsWrite, typename Submit>
void PostPendingQueue(std::deque<Op*>& queue, bool batching, size_t free_slots, bool& batch_open,
                      IsWrite is_write, Submit submit) {
  if (batching) return PostPendingQueueInBatches(queue, free_slots, batch_open, is_write, submit);
  while (!queue.empty()) {
    if (submit(queue.front(), uint64_t{0}) == -FI_EAGAIN) return;
    queue.pop_front();
  }
}

}  // namespace tutorial
