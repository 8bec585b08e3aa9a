// The pending queue's posting rules, with this test playing the provider:
// no loopback provider refuses posts on demand or honours FI_MORE, so a
// fake submit function stands in for fi_writemsg here (EFA's rules in
// /work/shared/DESIGN.md; the real providers are exercised end to end).
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
  std::vector<uint64_t> accepted_flags;
  std::vector<int> accepted_ids;
  int posts = 0;

  ssize_t operator()(FakeOp* op, uint64_t flags) {
    int n = posts++;
    for (int r : refuse_at) {
      if (r == n) return -FI_EAGAIN;
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

TEST(PostQueueTest, TheSeriesPostsWithoutFiMoreUntilRefused) {
  std::vector<FakeOp> ops = {{0}, {1}, {2}, {3}};
  auto queue = MakeQueue(ops);
  FakeProvider provider{{2}};
  bool open = false;
  PostPendingQueue(queue, /*batching=*/false, 100, open, IsWrite, std::ref(provider));
  EXPECT_EQ(provider.accepted_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(provider.accepted_flags, (std::vector<uint64_t>{0, 0}));
  ASSERT_EQ(queue.size(), 2u);  // the refused op stays at the front
  EXPECT_EQ(queue.front()->id, 2);
}

TEST(PostQueueTest, ABatchEndsWithoutFiMore) {
  std::vector<FakeOp> ops = {{0}, {1}, {2}, {3}};
  auto queue = MakeQueue(ops);
  FakeProvider provider;
  bool open = false;
  PostPendingQueue(queue, true, 100, open, IsWrite, std::ref(provider));
  EXPECT_EQ(provider.accepted_flags, (std::vector<uint64_t>{FI_MORE, FI_MORE, FI_MORE, 0}));
  EXPECT_FALSE(open);
  EXPECT_TRUE(queue.empty());
}

TEST(PostQueueTest, NoBatchIsLargerThanTheFreeTransmitSlots) {
  std::vector<FakeOp> ops = {{0}, {1}, {2}, {3}, {4}};
  auto queue = MakeQueue(ops);
  FakeProvider provider;
  bool open = false;
  PostPendingQueue(queue, true, /*free_slots=*/2, open, IsWrite, std::ref(provider));
  // Two slots: one batch of two, then (the queue may be full) one post at a
  // time, each closed.
  EXPECT_EQ(provider.accepted_flags, (std::vector<uint64_t>{FI_MORE, 0, 0, 0, 0}));
  EXPECT_FALSE(open);
}

TEST(PostQueueTest, ABatchCutShortByEagainIsClosedByTheNextPost) {
  std::vector<FakeOp> ops = {{0}, {1}, {2}, {3}};
  auto queue = MakeQueue(ops);
  FakeProvider provider{{2}};  // the third post (FI_MORE) is refused
  bool open = false;
  PostPendingQueue(queue, true, 100, open, IsWrite, std::ref(provider));
  EXPECT_EQ(provider.accepted_flags, (std::vector<uint64_t>{FI_MORE, FI_MORE}));
  EXPECT_TRUE(open);  // the NIC holds two WRITEs waiting for a doorbell
  // The next attempt (after the next completion-queue read) must ring it.
  PostPendingQueue(queue, true, 100, open, IsWrite, std::ref(provider));
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
      PostPendingQueue(queue, true, 4, open, IsWrite, std::ref(provider));
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

}  // namespace
}  // namespace tutorial
