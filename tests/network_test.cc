// Buffers, Network and NetworkGroup against the real shm provider: two
// endpoints in this process talk to each other, no mock in between.
#include "common/network.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "common/buffer.h"
#include "common/errors.h"
#include "harness/recovery_nic.h"

namespace tutorial {
namespace {

// Chapter 15's way to post: the WRITE only joins the queue; the next poll
// posts it.
void QueueWrite(Network& net, const RdmaWrite& write, OpCallback callback) {
  RdmaOp* op = net.NewOp(OpType::kWrite, std::move(callback));
  op->write = write;
  net.pending_ops.push_back(op);
}

TEST(BufferTest, HostBufferIsAlignedZeroedAndCopies) {
  Buffer buffer = Buffer::Allocate(MemoryKind::kHost, -1, 10000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 4096, 0u);
  EXPECT_EQ(buffer.size(), 10000u);
  const auto* bytes = static_cast<const uint8_t*>(buffer.data());
  for (size_t i = 0; i < buffer.size(); ++i) ASSERT_EQ(bytes[i], 0) << i;
  const char text[] = "hello";
  buffer.CopyFromHost(9990, text, sizeof(text));
  char back[sizeof(text)] = {};
  buffer.CopyToHost(9990, back, sizeof(back));
  EXPECT_STREQ(back, "hello");
  EXPECT_THROW(buffer.CopyFromHost(9999, text, sizeof(text)), RuntimeError);
  EXPECT_THROW(buffer.CopyToHost(10001, back, 1), RuntimeError);
  EXPECT_EQ(buffer.DmabufFd(), -1);
}

TEST(BufferTest, MovesOwnership) {
  Buffer a = Buffer::Allocate(MemoryKind::kHost, -1, 4096);
  void* data = a.data();
  Buffer b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
}

TEST(BufferTest, ZeroSizeIsAUsageError) {
  EXPECT_THROW(Buffer::Allocate(MemoryKind::kHost, -1, 0), UsageError);
}

TEST(BufferTest, CudaWithoutCudaIsAClearError) {
  if (BuiltWithCuda() && CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  if (!BuiltWithCuda()) {
    EXPECT_THROW(Buffer::Allocate(MemoryKind::kCuda, 0, 4096), UsageError);
  }
  EXPECT_EQ(CudaDeviceCount(), 0);
}

TEST(FindNicsTest, UnknownProviderIsAUsageError) {
  EXPECT_THROW(FindNics(FabricChoice{"no-such-provider", MemoryKind::kHost, ""}), UsageError);
  EXPECT_THROW(FindNics(FabricChoice{"tcp", MemoryKind::kHost, "no-such-interface"}), UsageError);
}

// Two shm endpoints of this process, each with a registered buffer.
class ShmPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    infos_ = FindNics(FabricChoice{"shm", MemoryKind::kHost, ""});
    a_ = std::make_unique<Network>(*infos_[0]);
    b_ = std::make_unique<Network>(*infos_[0]);
    a_buf_ = std::make_unique<Buffer>(Buffer::Allocate(MemoryKind::kHost, -1, 1 << 16));
    b_buf_ = std::make_unique<Buffer>(Buffer::Allocate(MemoryKind::kHost, -1, 1 << 16));
    a_mr_ = a_->Register(*a_buf_);
    b_mr_ = b_->Register(*b_buf_);
    b_in_a_ = a_->AddPeer(b_->address());
    a_in_b_ = b_->AddPeer(a_->address());
  }

  // Polls both sides until `done` holds, at most two seconds.
  bool PollUntil(const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!done()) {
      a_->PollCompletion();
      b_->PollCompletion();
      if (std::chrono::steady_clock::now() > deadline) return false;
    }
    return true;
  }

  std::vector<FiInfoPtr> infos_;
  std::unique_ptr<Network> a_, b_;
  std::unique_ptr<Buffer> a_buf_, b_buf_;
  MemoryRegion a_mr_, b_mr_;
  fi_addr_t b_in_a_ = FI_ADDR_UNSPEC, a_in_b_ = FI_ADDR_UNSPEC;
};

TEST_F(ShmPairTest, SendAndReceive) {
  size_t received = 0;
  bool sent = false;
  b_->PostRecv(b_buf_->data(), 1024, b_mr_.desc(), [&](Network&, RdmaOp& op) {
    ASSERT_TRUE(op.ok()) << op.error_message;
    received = op.received;
  });
  std::memcpy(a_buf_->data(), "ping", 4);
  a_->PostSend(b_in_a_, a_buf_->data(), 4, a_mr_.desc(), [&](Network&, RdmaOp& op) {
    EXPECT_TRUE(op.ok()) << op.error_message;
    sent = true;
  });
  ASSERT_TRUE(PollUntil([&] { return sent && received > 0; }));
  EXPECT_EQ(received, 4u);
  EXPECT_EQ(std::memcmp(b_buf_->data(), "ping", 4), 0);
  EXPECT_EQ(a_->outstanding_transmits(), 0u);
}

TEST_F(ShmPairTest, WriteWithCqDataReachesThePeer) {
  uint64_t seen = 0;
  bool written = false;
  b_->OnRemoteWrite([&](Network&, uint64_t data) { seen = data; });
  std::memset(a_buf_->data(), 0xAB, 4096);
  RdmaWrite w;
  w.local = a_buf_->data();
  w.length = 4096;
  w.local_desc = a_mr_.desc();
  w.peer = b_in_a_;
  w.remote_addr = b_mr_.remote_addr() + 8192;
  w.remote_key = b_mr_.key();
  w.has_cq_data = true;
  w.cq_data = 0xC0FFEE;
  a_->PostWrite(w, [&](Network&, RdmaOp& op) {
    EXPECT_TRUE(op.ok()) << op.error_message;
    written = true;
  });
  ASSERT_TRUE(PollUntil([&] { return written && seen != 0; }));
  EXPECT_EQ(seen, 0xC0FFEEu);
  const auto* target = static_cast<const uint8_t*>(b_buf_->data());
  EXPECT_EQ(target[8192], 0xAB);
  EXPECT_EQ(target[8192 + 4095], 0xAB);
  EXPECT_EQ(target[8192 + 4096], 0);
}

TEST_F(ShmPairTest, QueuedWritesGoOutOnPoll) {
  int done = 0;
  RdmaWrite w;
  w.local = a_buf_->data();
  w.length = 64;
  w.local_desc = a_mr_.desc();
  w.peer = b_in_a_;
  w.remote_key = b_mr_.key();
  for (int i = 0; i < 10; ++i) {
    w.remote_addr = b_mr_.remote_addr() + 64 * i;
    QueueWrite(*a_, w, [&](Network&, RdmaOp& op) {
      EXPECT_TRUE(op.ok());
      ++done;
    });
  }
  EXPECT_EQ(a_->pending(), 10u);  // nothing handed to the provider yet
  ASSERT_TRUE(PollUntil([&] { return done == 10; }));
  EXPECT_EQ(a_->pending(), 0u);
}

TEST_F(ShmPairTest, OversizedMessageIsAnErrorCompletion) {
  int error = 0;
  bool sent = false;
  b_->PostRecv(b_buf_->data(), 16, b_mr_.desc(), [&](Network&, RdmaOp& op) { error = op.error; });
  a_->PostSend(b_in_a_, a_buf_->data(), 1024, a_mr_.desc(),
               [&](Network&, RdmaOp&) { sent = true; });
  ASSERT_TRUE(PollUntil([&] { return error != 0; }));
  EXPECT_EQ(error, FI_ETRUNC);
  PollUntil([&] { return sent; });
}

TEST_F(ShmPairTest, RejectsAMalformedPeerAddress) {
  // shm names are strings; an empty one is no address at all. The check is
  // the harness's, which every program attaches to its Networks.
  NicHarness harness(*a_);
  EXPECT_THROW(a_->AddPeer(std::vector<uint8_t>{}), RuntimeError);
}

TEST_F(ShmPairTest, NetworkGroupGoesRoundRobin) {
  Network c(*infos_[0]);
  NetworkGroup group({a_.get(), b_.get(), &c});
  EXPECT_EQ(group.GetNext(), 0u);
  EXPECT_EQ(group.GetNext(), 1u);
  EXPECT_EQ(group.GetNext(), 2u);
  EXPECT_EQ(group.GetNext(), 0u);
  EXPECT_FALSE(group.Backlogged(64));
  RdmaWrite w;
  w.local = a_buf_->data();
  w.length = 8;
  w.local_desc = a_mr_.desc();
  w.peer = b_in_a_;
  w.remote_addr = b_mr_.remote_addr();
  w.remote_key = b_mr_.key();
  int done = 0;
  for (int i = 0; i < 64; ++i) QueueWrite(*a_, w, [&](Network&, RdmaOp&) { ++done; });
  EXPECT_TRUE(group.Backlogged(64));  // 64 writes wait in a's queue
  ASSERT_TRUE(PollUntil([&] { return done == 64; }));
  EXPECT_FALSE(group.Backlogged(64));
}

// The provider's transmit queue depth (tx_attr->size) bounds the transmits
// a Network hands it; the rest wait in its own queue. efa refuses beyond
// that depth itself; tcp would take every post and keep an entry for each
// (a peer that stops reading would hold a whole transfer's WRITEs). Fails
// without the bound in Network::Post.
class QueueDepthTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QueueDepthTest, NoMoreTransmitsWithTheProviderThanItsDepth) {
  constexpr size_t kDepth = 8, kWrites = 100, kPage = 64;
  const std::string provider = GetParam();
  auto infos = FindNics(FabricChoice{provider, MemoryKind::kHost, provider == "tcp" ? "lo" : ""});
  infos[0]->tx_attr->size = kDepth;  // what a provider with a shallow queue advertises
  Network a(*infos[0]), b(*infos[0]);
  NicHarness meter_of_a(a);
  Buffer a_buf = Buffer::Allocate(MemoryKind::kHost, -1, kWrites * kPage);
  Buffer b_buf = Buffer::Allocate(MemoryKind::kHost, -1, kWrites * kPage);
  MemoryRegion a_mr = a.Register(a_buf), b_mr = b.Register(b_buf);
  fi_addr_t b_in_a = a.AddPeer(b.address());
  b.AddPeer(a.address());
  auto* source = static_cast<uint8_t*>(a_buf.data());
  for (size_t i = 0; i < kWrites * kPage; ++i) source[i] = static_cast<uint8_t>(i / kPage + 1);

  size_t done = 0;
  auto write = [&](size_t i) {
    RdmaWrite w;
    w.local = source + i * kPage;
    w.length = kPage;
    w.local_desc = a_mr.desc();
    w.peer = b_in_a;
    w.remote_addr = b_mr.remote_addr() + i * kPage;
    w.remote_key = b_mr.key();
    a.PostWrite(w, [&](Network&, RdmaOp& op) {
      EXPECT_TRUE(op.ok()) << op.error_message;
      ++done;
    });
  };
  auto poll_until_done = [&](size_t want) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (done < want && std::chrono::steady_clock::now() < deadline) {
      a.PollCompletion();
      b.PollCompletion();
    }
    return done == want;
  };
  // One WRITE first: tcp sets its connection up on the first post.
  write(0);
  ASSERT_TRUE(poll_until_done(1));

  uint64_t refused_before = meter_of_a.meter().counters().eagain;
  for (size_t i = 1; i < kWrites; ++i) write(i);
  // Posted without a poll between them: the provider holds kDepth, our
  // queue the rest (more, if the provider refused some earlier itself).
  EXPECT_GE(a.pending(), kWrites - 1 - kDepth);
  EXPECT_GE(meter_of_a.meter().counters().eagain - refused_before, kWrites - 1 - kDepth);
  EXPECT_EQ(a.outstanding_transmits(), kWrites - 1);

  ASSERT_TRUE(poll_until_done(kWrites));
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(std::memcmp(a_buf.data(), b_buf.data(), kWrites * kPage), 0);
}

INSTANTIATE_TEST_SUITE_P(Providers, QueueDepthTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tutorial
