// The pending queue's posting rules, with this test playing the provider:
// no loopback provider refuses posts on demand or honours FI_MORE, so a
// fake submit function stands in for fi_writemsg here (EFA's rules in
// docs/running-on-p5.md; the real providers are exercised end to end).
#include "common/post_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

namespace tutorial {
namespace {

struct FakeOp {
  int id;
  bool write = true;
};

// Accepts posts until `refuse_at` (a post count), records each post's flags.
struct FakeProvider {
  std::vector<int> refuse_at;  // post numbers answered -FI_EAGAIN
  std::vector<int> fail_ids;   // ops whose post fails for good (-FI_EINVAL)
  std::vector<uint64_t> accepted_flags;
  std::vector<int> accepted_ids;
  int posts = 0;

  ssize_t operator()(FakeOp* op, uint64_t flags) {
    int n = posts++;
    for (int r : refuse_at) {
      if (r == n) return -FI_EAGAIN;
    }
    for (int id : fail_ids) {
      if (id == op->id) return -FI_EINVAL;
    }
    accepted_flags.push_back(flags);
    accepted_ids.push_back(op->id);
    return 0;
  }
};

std::deque<FakeOp*> MakeQueue(std::vector<FakeOp>& ops) {
  std::deque<FakeOp*> queue;
  for (FakeOp& op : ops) queue.push_back(&op);
  return queue;
}

auto IsWrite = [](const FakeOp* op) { return op->write; };

TEST(PostQueueTest, ABatchEndsWithoutFiMore) {
  std::vector<FakeOp> ops = {{0}, {1}, {2}, {3}};
  auto queue = MakeQueue(ops);
  FakeProvider provider;
  bool open = false;
  PostPendingQueueInBatches(queue, 100, open, IsWrite, std::ref(provider));
  EXPECT_EQ(provider.accepted_flags, (std::vector<uint64_t>{FI_MORE, FI_MORE, FI_MORE, 0}));
  EXPECT_FALSE(open);
  EXPECT_TRUE(queue.empty());
}

TEST(PostQueueTest, NoBatchIsLargerThanTheFreeTransmitSlots) {
  std::vector<FakeOp> ops = {{0}, {1}, {2}, {3}, {4}};
  auto queue = MakeQueue(ops);
  FakeProvider provider;
  bool open = false;
  PostPendingQueueInBatches(queue, /*free_slots=*/2, open, IsWrite, std::ref(provider));
  // Two slots: one batch of two, then (the queue may be full) one post at a
  // time, each closed.
  EXPECT_EQ(provider.accepted_flags, (std::vector<uint64_t>{FI_MORE, 0, 0, 0, 0}));
  EXPECT_FALSE(open);
}

TEST(PostQueueTest, ABatchCutShortByEagainIsClosedByTheNextPost) {
  std::vector<FakeOp> ops = {{0}, {1}, {2}, {3}};
  auto queue = MakeQueue(ops);
  FakeProvider provider;
  provider.refuse_at = {2};  // the third post (FI_MORE) is refused
  bool open = false;
  PostPendingQueueInBatches(queue, 100, open, IsWrite, std::ref(provider));
  EXPECT_EQ(provider.accepted_flags, (std::vector<uint64_t>{FI_MORE, FI_MORE}));
  EXPECT_TRUE(open);  // the NIC holds two WRITEs waiting for a doorbell
  // The next attempt (after the next completion-queue read) must ring it.
  PostPendingQueueInBatches(queue, 100, open, IsWrite, std::ref(provider));
  ASSERT_GE(provider.accepted_flags.size(), 3u);
  EXPECT_EQ(provider.accepted_flags[2], 0u) << "the open batch was not closed";
  EXPECT_EQ(provider.accepted_flags.back(), 0u);
  EXPECT_FALSE(open);
  EXPECT_TRUE(queue.empty());
}

TEST(PostQueueTest, EveryAcceptedSequenceEndsWithADoorbell) {
  // Refuse posts at every pattern of positions; whatever happens, once the
  // queue is empty no accepted post may be left waiting behind FI_MORE.
  for (int pattern = 0; pattern < 64; ++pattern) {
    std::vector<FakeOp> ops;
    for (int i = 0; i < 6; ++i) ops.push_back(FakeOp{i, i != 3});  // op 3 is a send
    auto queue = MakeQueue(ops);
    FakeProvider provider;
    for (int bit = 0; bit < 6; ++bit) {
      if (pattern & (1 << bit)) provider.refuse_at.push_back(bit * 2);
    }
    bool open = false;
    for (int attempt = 0; attempt < 50 && !queue.empty(); ++attempt) {
      PostPendingQueueInBatches(queue, 4, open, IsWrite, std::ref(provider));
    }
    ASSERT_TRUE(queue.empty()) << "pattern " << pattern;
    EXPECT_FALSE(open) << "pattern " << pattern;
    EXPECT_EQ(provider.accepted_flags.back(), 0u) << "pattern " << pattern;
    EXPECT_EQ(provider.accepted_ids, (std::vector<int>{0, 1, 2, 3, 4, 5})) << "order kept";
    // A send never carries FI_MORE, nor does the write before it.
    EXPECT_EQ(provider.accepted_flags[3], 0u);
    EXPECT_EQ(provider.accepted_flags[2], 0u);
  }
}

// A post that fails for good rings no doorbell: the WRITEs accepted before
// it with FI_MORE still wait, so the batch stays open.
TEST(PostQueueTest, AFailedCloserLeavesTheBatchOpen) {
  std::vector<FakeOp> ops = {{0}, {1}, {2}, {3}};
  auto queue = MakeQueue(ops);
  FakeProvider provider;
  provider.fail_ids = {3};  // the closing post (no FI_MORE) fails
  bool open = false;
  PostPendingQueueInBatches(queue, 100, open, IsWrite, std::ref(provider));
  EXPECT_EQ(provider.accepted_flags, (std::vector<uint64_t>{FI_MORE, FI_MORE, FI_MORE}));
  EXPECT_TRUE(queue.empty());
  EXPECT_TRUE(open) << "no doorbell rang for the three WRITEs";
  // The next post closes it.
  FakeOp next{4};
  queue.push_back(&next);
  PostPendingQueueInBatches(queue, 100, open, IsWrite, std::ref(provider));
  EXPECT_EQ(provider.accepted_flags.back(), 0u);
  EXPECT_FALSE(open);
}

TEST(PostQueueTest, AFailedPostMidBatchIsClosedByTheNextPost) {
  std::vector<FakeOp> ops = {{0}, {1}, {2}, {3}, {4}};
  auto queue = MakeQueue(ops);
  FakeProvider provider;
  provider.fail_ids = {1};
  bool open = false;
  PostPendingQueueInBatches(queue, 100, open, IsWrite, std::ref(provider));
  EXPECT_EQ(provider.accepted_ids, (std::vector<int>{0, 2, 3, 4}));
  // 0 went out with FI_MORE; 2 rings its doorbell alone; 3 and 4 batch.
  EXPECT_EQ(provider.accepted_flags, (std::vector<uint64_t>{FI_MORE, 0, FI_MORE, 0}));
  EXPECT_FALSE(open);
}

TEST(PostQueueTest, EveryAcceptedSequenceEndsWithADoorbellDespiteFailures) {
  for (int pattern = 0; pattern < 64; ++pattern) {
    std::vector<FakeOp> ops;
    for (int i = 0; i < 6; ++i) ops.push_back(FakeOp{i});
    ops.push_back(FakeOp{6});  // never fails: the queue's last word
    auto queue = MakeQueue(ops);
    FakeProvider provider;
    for (int bit = 0; bit < 6; ++bit) {
      if (pattern & (1 << bit)) provider.fail_ids.push_back(bit);
    }
    bool open = false;
    PostPendingQueueInBatches(queue, 4, open, IsWrite, std::ref(provider));
    ASSERT_TRUE(queue.empty()) << "pattern " << pattern;
    EXPECT_FALSE(open) << "pattern " << pattern;
    EXPECT_EQ(provider.accepted_flags.back(), 0u) << "pattern " << pattern;
  }
}

// Recovery gives queued transmits up, but never the post that must ring the
// doorbell of an open batch (DetachTransmits freed it).
TEST(PostQueueTest, GivingUpQueuedTransmitsKeepsTheCloserOfAnOpenBatch) {
  std::vector<FakeOp> ops = {{0, false}, {1}, {2}, {3, false}};  // 0 and 3 receives
  auto is_transmit = [](const FakeOp* op) { return op->write; };
  auto queue = MakeQueue(ops);
  FakeOp* closer = nullptr;
  std::deque<FakeOp*> taken = TakeQueuedTransmits(queue, /*batch_open=*/true, is_transmit, &closer);
  ASSERT_NE(closer, nullptr);
  EXPECT_EQ(closer->id, 1);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0]->id, 2);
  ASSERT_EQ(queue.size(), 3u);
  EXPECT_EQ(queue[0]->id, 0);
  EXPECT_EQ(queue[1]->id, 1);
  EXPECT_EQ(queue[2]->id, 3);

  auto closed = MakeQueue(ops);
  taken = TakeQueuedTransmits(closed, /*batch_open=*/false, is_transmit, &closer);
  EXPECT_EQ(closer, nullptr);
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_EQ(closed.size(), 2u);
}

// efa re-posts the WRITEs it queued before its handshake with a peer with
// the application's FI_MORE (efa_rdm_ep_enforce_handshake_for_txe): so a
// WRITE joins a batch only once a WRITE to its peer has completed.
TEST(PostQueueTest, WritesToAPeerThatHasNotAnsweredGoAloneWithoutFiMore) {
  struct PeerOp {
    int id;
    fi_addr_t peer;
  };
  std::vector<PeerOp> ops = {{0, 0}, {1, 0}, {2, 1}, {3, 1}, {4, 1}};
  std::deque<PeerOp*> queue;
  for (PeerOp& op : ops) queue.push_back(&op);
  ConfirmedPeers confirmed;
  confirmed.Confirm(1);  // peer 1 has answered, peer 0 not yet
  std::vector<uint64_t> flags;
  bool open = false;
  PostPendingQueueInBatches(
      queue, 100, open, [&](const PeerOp* op) { return confirmed.Confirmed(op->peer); },
      [&](PeerOp*, uint64_t f) -> ssize_t {
        flags.push_back(f);
        return 0;
      });
  EXPECT_EQ(flags, (std::vector<uint64_t>{0, 0, FI_MORE, FI_MORE, 0}));
  EXPECT_FALSE(open);

  // A slot of the address vector given to another peer must answer anew.
  confirmed.Forget(1);
  EXPECT_FALSE(confirmed.Confirmed(1));
  EXPECT_FALSE(confirmed.Confirmed(FI_ADDR_UNSPEC));
  confirmed.Confirm(FI_ADDR_UNSPEC);  // not an index: ignored
  EXPECT_FALSE(confirmed.Confirmed(FI_ADDR_UNSPEC));
}

}  // namespace
}  // namespace tutorial
