// The front door under a flood (common/front_door.h): a source cannot push
// out the others, replies to one address are limited, log lines about
// dropped messages are limited with a count of those left out, and a
// RANDOM_FILL is paired only with its own session's CONNECT, and only when
// it carries the cookies sent to every address that CONNECT declares.
// FrontDoorNetwork runs on real providers: over libfabric 1.x's tcp its
// messages arrive in the provider's own buffers, each given back.
#include "common/front_door.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#include "common/buffer.h"
#include "common/messages.h"
#include "common/network.h"

namespace tutorial {
namespace {

// As the server does (LimitProviderReceiveBuffers), before libfabric is
// first opened: ofi_rxm keeps 8 buffers posted, so that more messages than
// that arrive only if each buffer is given back. And rxm hands over up to 8
// messages per read (it hands over 1 by default), so that one read of the
// front door can take several.
const bool kFewProviderBuffers = setenv("FI_OFI_RXM_MSG_RX_SIZE", "8", 1) == 0 &&
                                 setenv("FI_OFI_RXM_COMP_PER_PROGRESS", "8", 1) == 0;

using Clock = std::chrono::steady_clock;

FairMailbox::Message From(uint8_t source) {
  return FairMailbox::Message{{1, 2, 3}, Clock::now(), std::vector<uint8_t>(4, source)};
}

TEST(FairMailbox, AFloodingSourceCannotPushOutTheOthers) {
  FairMailbox mailbox(/*capacity=*/8, /*per_source=*/3);
  size_t refused = 0;
  for (int i = 0; i < 100; ++i) refused += mailbox.Push(From(1)) != FairMailbox::Refused::kNo;
  EXPECT_EQ(refused, 97u);
  EXPECT_EQ(mailbox.Push(From(2)), FairMailbox::Refused::kNo) << "a good client found no room";
  EXPECT_EQ(mailbox.size(), 4u);
}

TEST(FairMailbox, FullMeansFullAndTakingMakesRoom) {
  FairMailbox mailbox(/*capacity=*/4, /*per_source=*/2);
  for (uint8_t s = 0; s < 2; ++s) {
    EXPECT_EQ(mailbox.Push(From(s)), FairMailbox::Refused::kNo);
    EXPECT_EQ(mailbox.Push(From(s)), FairMailbox::Refused::kNo);
  }
  EXPECT_EQ(mailbox.Push(From(9)), FairMailbox::Refused::kFull);
  std::optional<FairMailbox::Message> first = mailbox.Take();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->source, std::vector<uint8_t>(4, 0));  // in arrival order
  EXPECT_EQ(mailbox.Push(From(0)), FairMailbox::Refused::kNo);
  while (mailbox.Take()) {
  }
  EXPECT_TRUE(mailbox.empty());
}

// A sender that names a new address in every message escapes the
// per-source limit; it still cannot take the places kept for RANDOM_FILLs
// whose CONNECT was answered.
TEST(FairMailbox, ManySourcesCannotTakeTheReservedPlaces) {
  FairMailbox mailbox(/*capacity=*/8, /*per_source=*/3, /*reserved=*/2);
  size_t kept = 0;
  for (int i = 0; i < 100; ++i) kept += mailbox.Push(From(100 + i)) == FairMailbox::Refused::kNo;
  EXPECT_EQ(kept, 6u);
  EXPECT_EQ(mailbox.Push(From(1)), FairMailbox::Refused::kFull);
  EXPECT_EQ(mailbox.Push(From(1), /*awaited=*/true), FairMailbox::Refused::kNo);
  EXPECT_EQ(mailbox.Push(From(2), /*awaited=*/true), FairMailbox::Refused::kNo);
  EXPECT_EQ(mailbox.Push(From(3), /*awaited=*/true), FairMailbox::Refused::kFull);
  EXPECT_EQ(mailbox.size(), 8u);
}

TEST(FairMailbox, TheSourceIsTheSessionsAddress) {
  Session session{42, {7, 7, 7}};
  std::vector<uint8_t> bytes = EncodeEmpty(MessageType::kProbe, session);
  EXPECT_EQ(FairMailbox::SourceOf(bytes.data(), bytes.size()), session.address);
  std::vector<uint8_t> garbage(40, 0xAB);
  EXPECT_TRUE(FairMailbox::SourceOf(garbage.data(), garbage.size()).empty());
}

TEST(ReplyLimiter, OneReplyPerAddressAndInterval) {
  ReplyLimiter limiter(std::chrono::milliseconds(100), /*remembered=*/2);
  auto t0 = Clock::now();
  EXPECT_TRUE(limiter.Allow({1}, t0));
  EXPECT_FALSE(limiter.Allow({1}, t0 + std::chrono::milliseconds(50)));
  EXPECT_TRUE(limiter.Allow({2}, t0 + std::chrono::milliseconds(50)));
  EXPECT_TRUE(limiter.Allow({1}, t0 + std::chrono::milliseconds(150)));
  // A flood of new addresses: memory stays bounded (everyone is forgotten).
  for (uint8_t a = 10; a < 200; ++a) EXPECT_TRUE(limiter.Allow({a}, t0));
}

TEST(RateLimitedLog, AFewLinesThenACount) {
  std::vector<std::string> lines;
  RateLimitedLog log(3, std::chrono::seconds(10), "server: also dropped");
  log.sink = &lines;
  auto t0 = Clock::now();
  for (int i = 0; i < 1000; ++i) log.Line("server: dropped a message: " + std::to_string(i), t0);
  EXPECT_EQ(lines.size(), 3u);
  log.Flush(t0 + std::chrono::seconds(5));
  EXPECT_EQ(lines.size(), 3u) << "summary before the interval ended";
  log.Flush(t0 + std::chrono::seconds(11));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3].rfind("server: also dropped 997 more in the last 11 s", 0), 0u) << lines[3];
  EXPECT_NE(lines[3].find("dropped a message: 999"), std::string::npos);
  log.Line("next", t0 + std::chrono::seconds(12));
  EXPECT_EQ(lines.size(), 5u) << "a new interval writes in full again";
}

TEST(ReplyLimiter, AllOrNoneOfSeveralAddresses) {
  ReplyLimiter limiter(std::chrono::milliseconds(100));
  auto t0 = Clock::now();
  EXPECT_TRUE(limiter.Allow({2}, t0));
  EXPECT_FALSE(limiter.AllowAll({{1}, {2}, {3}}, t0 + std::chrono::milliseconds(50)));
  // The refusal counted nobody: 1 and 3 are still free.
  EXPECT_TRUE(limiter.AllowAll({{1}, {3}}, t0 + std::chrono::milliseconds(50)));
  EXPECT_FALSE(limiter.Allow({3}, t0 + std::chrono::milliseconds(60)));
  EXPECT_TRUE(limiter.AllowAll({{1}, {2}, {3}}, t0 + std::chrono::milliseconds(200)));
}

ConnectMessage ConnectOf(uint8_t tag) {
  ConnectMessage connect;
  connect.num_gpus = tag;
  return connect;
}

Session Client(uint64_t nonce, uint8_t address = 1) {
  return Session{nonce, std::vector<uint8_t>(16, address)};
}

constexpr auto kMaxAge = std::chrono::seconds(15);

TEST(FairMailbox, HoldsASourceWhileOneOfItsMessagesWaits) {
  FairMailbox mailbox(/*capacity=*/4, /*per_source=*/2);
  EXPECT_FALSE(mailbox.Holds(std::vector<uint8_t>(4, 1)));
  ASSERT_EQ(mailbox.Push(From(1)), FairMailbox::Refused::kNo);
  EXPECT_TRUE(mailbox.Holds(std::vector<uint8_t>(4, 1)));
  EXPECT_FALSE(mailbox.Holds(std::vector<uint8_t>(4, 2)));
  mailbox.Take();
  EXPECT_FALSE(mailbox.Holds(std::vector<uint8_t>(4, 1)));
}

TEST(RecentlyChecked, RemembersPassesForAWhileAndBoundsItsMemory) {
  RecentlyChecked checked(std::chrono::milliseconds(1000), /*remembered=*/2);
  auto t0 = Clock::now();
  EXPECT_FALSE(checked.Passed({1}, t0)) << "never checked";
  checked.NotePass({1}, t0);
  EXPECT_TRUE(checked.Passed({1}, t0 + std::chrono::milliseconds(999)));
  EXPECT_FALSE(checked.Passed({1}, t0 + std::chrono::milliseconds(1000))) << "checked again";
  checked.NotePass({2}, t0);
  checked.NotePass({3}, t0);  // a third forgets the others
  EXPECT_TRUE(checked.Passed({3}, t0));
  EXPECT_FALSE(checked.Passed({1}, t0));
}

TEST(WindowBudget, SoManyUsesPerWindowThenNoneUntilTheNext) {
  WindowBudget budget(2, std::chrono::milliseconds(1000));
  auto t0 = Clock::now();
  EXPECT_TRUE(budget.Take(t0));
  EXPECT_TRUE(budget.Take(t0 + std::chrono::milliseconds(10)));
  EXPECT_FALSE(budget.Take(t0 + std::chrono::milliseconds(999)));
  EXPECT_TRUE(budget.Take(t0 + std::chrono::milliseconds(1000))) << "a new window";
}

TEST(WhyReplyMayNotWait, SendersThatAreNotReachedHoldFewSlots) {
  std::vector<WaitingReply> waiting;
  for (uint64_t i = 0; i < 3; ++i) waiting.push_back(WaitingReply{true, Client(i + 1, i + 1)});
  EXPECT_EQ(WhyReplyMayNotWait(waiting, true, Client(9, 9), 4), "");
  waiting.push_back(WaitingReply{true, Client(4, 4)});
  EXPECT_NE(WhyReplyMayNotWait(waiting, true, Client(9, 9), 4), "") << "a fifth sender";
  // The other NICs of a CONNECT whose sender was reached do not count.
  EXPECT_EQ(WhyReplyMayNotWait(waiting, false, Client(9, 9), 4), "");
}

TEST(WhyReplyMayNotWait, OneSenderWaitsForOneConnectsNicsAtATime) {
  std::vector<WaitingReply> waiting{WaitingReply{false, Client(7)}};
  EXPECT_EQ(WhyReplyMayNotWait(waiting, false, Client(7), 4), "") << "its next NIC";
  EXPECT_NE(WhyReplyMayNotWait(waiting, false, Client(8), 4), "") << "another session";
  EXPECT_EQ(WhyReplyMayNotWait(waiting, false, Client(8, 2), 4), "") << "another sender";
}

TEST(PendingConnects, AwaitsOnlyTheSessionsItKeeps) {
  PendingConnects pending(4, kMaxAge);
  ASSERT_NE(pending.Keep(Client(7), ConnectOf(3), Clock::now()).cookie, 0u);
  EXPECT_TRUE(pending.Awaits(Client(7)));
  EXPECT_FALSE(pending.Awaits(Client(8))) << "another nonce";
  EXPECT_FALSE(pending.Awaits(Client(7, 2))) << "another address";
  EXPECT_TRUE(pending.Forget(Client(7)));
  EXPECT_FALSE(pending.Awaits(Client(7)));
}

TEST(PendingConnects, ARandomFillEchoingTheCookieIsPaired) {
  PendingConnects pending(4, kMaxAge);
  PendingConnects::Kept kept = pending.Keep(Client(7), ConnectOf(3), Clock::now());
  ASSERT_NE(kept.cookie, 0u);
  ConnectMessage connect;
  EXPECT_EQ(pending.Take(Client(7), kept.cookie, &connect), PendingConnects::Pairing::kPaired);
  EXPECT_EQ(connect.num_gpus, 3u);
  EXPECT_EQ(pending.size(), 0u);
  EXPECT_EQ(pending.Take(Client(7), kept.cookie, &connect), PendingConnects::Pairing::kNoConnect)
      << "paired twice";
}

TEST(PendingConnects, AWrongOrMissingCookieIsNotPairedAndEndsTheConnect) {
  for (bool missing : {false, true}) {
    PendingConnects pending(4, kMaxAge);
    uint64_t cookie = pending.Keep(Client(7), ConnectOf(3), Clock::now()).cookie;
    ConnectMessage connect;
    uint64_t guess = missing ? 0 : cookie ^ 1;
    EXPECT_EQ(pending.Take(Client(7), guess, &connect), PendingConnects::Pairing::kWrongCookie);
    EXPECT_EQ(connect.num_gpus, 0u) << "the CONNECT was handed over without its cookie";
    // One guess per CONNECT: the right cookie comes too late.
    EXPECT_EQ(pending.Take(Client(7), cookie, &connect), PendingConnects::Pairing::kNoConnect);
  }
}

TEST(PendingConnects, TheCookieIsPairedOnlyWithItsOwnSession) {
  PendingConnects pending(4, kMaxAge);
  uint64_t cookie = pending.Keep(Client(7, 1), ConnectOf(3), Clock::now()).cookie;
  ConnectMessage connect;
  EXPECT_EQ(pending.Take(Client(8, 1), cookie, &connect), PendingConnects::Pairing::kNoConnect)
      << "another nonce";
  EXPECT_EQ(pending.Take(Client(7, 2), cookie, &connect), PendingConnects::Pairing::kNoConnect)
      << "another address";
  EXPECT_EQ(pending.Take(Client(7, 1), cookie, &connect), PendingConnects::Pairing::kPaired);
}

TEST(PendingConnects, CookiesDifferAndANewSessionOfAnAddressReplacesTheOld) {
  PendingConnects pending(4, kMaxAge);
  uint64_t first = pending.Keep(Client(1), ConnectOf(1), Clock::now()).cookie;
  uint64_t second = pending.Keep(Client(2), ConnectOf(2), Clock::now()).cookie;
  EXPECT_NE(first, second);
  EXPECT_EQ(pending.size(), 1u);
  ConnectMessage connect;
  EXPECT_EQ(pending.Take(Client(1), first, &connect), PendingConnects::Pairing::kNoConnect);
  EXPECT_EQ(pending.Take(Client(2), second, &connect), PendingConnects::Pairing::kPaired);
  EXPECT_EQ(connect.num_gpus, 2u);
}

// A client whose CHALLENGE was slow sends its CONNECT again, in the same
// session: either CHALLENGE that reaches it carries the cookie that pairs.
TEST(PendingConnects, AConnectSentAgainInItsSessionKeepsItsCookie) {
  PendingConnects pending(4, kMaxAge);
  auto t0 = Clock::now();
  uint64_t first = pending.Keep(Client(7), ConnectOf(1), t0).cookie;
  EXPECT_EQ(pending.Keep(Client(7), ConnectOf(1), t0 + std::chrono::seconds(3)).cookie, first);
  EXPECT_EQ(pending.size(), 1u);
  // Past its age, a CONNECT sent again is a new one, with a new cookie.
  EXPECT_NE(pending.Keep(Client(7), ConnectOf(1), t0 + kMaxAge * 2).cookie, first);
}

TEST(PendingConnects, BoundedInNumberAndAge) {
  PendingConnects pending(2, kMaxAge);
  auto t0 = Clock::now();
  EXPECT_NE(pending.Keep(Client(1, 1), ConnectOf(1), t0).cookie, 0u);
  EXPECT_NE(pending.Keep(Client(2, 2), ConnectOf(2), t0).cookie, 0u);
  EXPECT_EQ(pending.Keep(Client(3, 3), ConnectOf(3), t0).cookie, 0u) << "kept beyond capacity";
  EXPECT_EQ(pending.size(), 2u);
  PendingConnects::Kept later = pending.Keep(Client(3, 3), ConnectOf(3), t0 + kMaxAge * 2);
  EXPECT_NE(later.cookie, 0u);
  EXPECT_EQ(later.expired, 2u);
  EXPECT_EQ(pending.size(), 1u);
  EXPECT_TRUE(pending.Forget(Client(3, 3)));
  EXPECT_FALSE(pending.Forget(Client(3, 3)));
}

// A CONNECT of one GPU whose NICs have these addresses.
ConnectMessage ConnectWithNics(const std::vector<std::vector<uint8_t>>& nics) {
  ConnectMessage connect;
  connect.num_gpus = 1;
  connect.nics_per_gpu = static_cast<uint32_t>(nics.size());
  connect.nic_addresses = nics;
  return connect;
}

TEST(PendingConnects, EveryDeclaredAddressHasItsOwnCookieOnce) {
  const std::vector<uint8_t> a(16, 1), b(16, 2), c(16, 3);
  Session session{7, a};
  ConnectMessage connect = ConnectWithNics({a, b, c, b});
  EXPECT_EQ(DeclaredAddresses(session, connect), (std::vector<std::vector<uint8_t>>{a, b, c}));
  PendingConnects pending(4, kMaxAge);
  PendingConnects::Kept kept = pending.Keep(session, connect, Clock::now());
  ASSERT_EQ(kept.challenges.size(), 3u) << "one CHALLENGE per distinct address";
  uint64_t sum = 0;
  for (size_t i = 0; i < kept.challenges.size(); ++i) {
    EXPECT_EQ(kept.challenges[i].address, DeclaredAddresses(session, connect)[i]);
    EXPECT_NE(kept.challenges[i].cookie, 0u);
    sum ^= kept.challenges[i].cookie;
  }
  EXPECT_EQ(kept.cookie, sum);
  EXPECT_NE(kept.challenges[0].cookie, kept.challenges[1].cookie);
  ConnectMessage taken;
  EXPECT_EQ(pending.Take(session, sum, &taken), PendingConnects::Pairing::kPaired);
  EXPECT_EQ(taken.nic_addresses.size(), 4u);
}

// A peer that receives at NIC 0 only (it declared another process's
// endpoint as NIC 1) knows NIC 0's cookie alone: that is not enough.
TEST(PendingConnects, NicZerosCookieAloneDoesNotPair) {
  const std::vector<uint8_t> own(16, 1), bystander(16, 9);
  Session session{7, own};
  PendingConnects pending(4, kMaxAge);
  PendingConnects::Kept kept =
      pending.Keep(session, ConnectWithNics({own, bystander}), Clock::now());
  ASSERT_EQ(kept.challenges.size(), 2u);
  EXPECT_EQ(kept.challenges[1].address, bystander);
  ConnectMessage taken;
  EXPECT_EQ(pending.Take(session, kept.challenges[0].cookie, &taken),
            PendingConnects::Pairing::kWrongCookie);
  EXPECT_EQ(taken.num_gpus, 0u) << "the CONNECT was handed over without every cookie";
}

TEST(PendingConnects, AConnectSentAgainKeepsEveryCookieOnlyWithTheSameAddresses) {
  const std::vector<uint8_t> a(16, 1), b(16, 2), c(16, 3);
  Session session{7, a};
  PendingConnects pending(4, kMaxAge);
  auto t0 = Clock::now();
  PendingConnects::Kept first = pending.Keep(session, ConnectWithNics({a, b}), t0);
  PendingConnects::Kept again =
      pending.Keep(session, ConnectWithNics({a, b}), t0 + std::chrono::seconds(3));
  ASSERT_EQ(again.challenges.size(), 2u);
  EXPECT_EQ(again.cookie, first.cookie);
  EXPECT_EQ(again.challenges[1].cookie, first.challenges[1].cookie);
  // The same session naming another NIC address is a new request: new
  // cookies, so none learnt at b helps.
  PendingConnects::Kept other =
      pending.Keep(session, ConnectWithNics({a, c}), t0 + std::chrono::seconds(4));
  EXPECT_NE(other.challenges[0].cookie, first.challenges[0].cookie);
  EXPECT_EQ(pending.size(), 1u);
}

TEST(FrontDoorNetwork, AsksForBufferedReceivesOnlyFromLibfabric1Tcp) {
  EXPECT_TRUE(FrontDoorNetwork::WantsBufferedReceives(FI_VERSION(1, 17), "tcp;ofi_rxm"));
  EXPECT_FALSE(FrontDoorNetwork::WantsBufferedReceives(FI_VERSION(2, 1), "tcp;ofi_rxm"));
  EXPECT_FALSE(FrontDoorNetwork::WantsBufferedReceives(FI_VERSION(2, 1), "tcp"));
  EXPECT_FALSE(FrontDoorNetwork::WantsBufferedReceives(FI_VERSION(1, 17), "shm"));
  EXPECT_FALSE(FrontDoorNetwork::WantsBufferedReceives(FI_VERSION(1, 17), "efa"));
}

TEST(FrontDoorNetwork, ShmPostsItsReceives) {
  ASSERT_TRUE(kFewProviderBuffers);
  std::vector<FiInfoPtr> nics = FindNics(FabricChoice{"shm", MemoryKind::kHost, ""});
  FrontDoorNetwork door(*nics[0]);
  EXPECT_EQ(door.receive_mode(), FrontDoorNetwork::ReceiveMode::kPosted);
}

// Watches the front door's completion-queue reads: the most entries one
// read returned (no other hook does anything).
class ReadSizes : public NetworkHooks {
 public:
  void EnterProvider(ProviderCall) override {}
  void LeaveProvider(ProviderCall call, ssize_t ret, uint64_t) override {
    if (call == ProviderCall::kCqRead && ret > 0) most = std::max(most, static_cast<size_t>(ret));
  }
  void HeldBack() override {}
  void Queued(const RdmaOp&, bool) override {}
  bool Deliver(RdmaOp&) override { return true; }
  void ErrorWithoutOp(Network&, const std::string&) override {}
  void CheckPeerAddress(const Network&, const std::vector<uint8_t>&) override {}
  void AddressVectorRefused(Network&) override {}
  size_t most = 0;
};

// A front door and a sender over tcp on lo, in this process.
class TcpFrontDoorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kFewProviderBuffers);
    nics_ = FindNics(FabricChoice{"tcp", MemoryKind::kHost, "lo"});
    door_ = std::make_unique<FrontDoorNetwork>(*nics_[0]);
    door_->OnMessage(
        [this](const uint8_t* data, size_t length) { messages_.emplace_back(data, data + length); },
        [this](const std::string& why) { dropped_.push_back(why); });
    sender_ = std::make_unique<Network>(*nics_[0]);
    buffer_ = std::make_unique<Buffer>(Buffer::Allocate(MemoryKind::kHost, -1, kBufferSize));
    region_ = sender_->Register(*buffer_);
    door_in_sender_ = sender_->AddPeer(door_->address());
  }

  // Sends `count` messages of `length` bytes (byte i of message m is
  // m + i, mod 256), at most 16 in flight. `quietly`: without reading the
  // front door meanwhile, so that its next read finds many at once.
  void Send(size_t count, size_t length, bool quietly = false) {
    auto* bytes = static_cast<uint8_t*>(buffer_->data());
    for (size_t m = 0; m < count; ++m) {
      ASSERT_TRUE(PollUntil([&] { return sending_ < 16; }, quietly)) << "sends stopped completing";
      uint8_t* slot = bytes + (m % 16) * kSlotSize;
      for (size_t i = 0; i < length; ++i) slot[i] = static_cast<uint8_t>(m + i);
      ++sending_;
      sender_->PostSend(door_in_sender_, slot, length, region_.desc(),
                        [this](Network&, RdmaOp& op) {
                          EXPECT_TRUE(op.ok()) << op.error_message;
                          --sending_;
                        });
    }
  }

  // Polls both sides until `done` holds, at most 20 seconds (a busy machine);
  // an error out of the front door's poll is counted.
  bool PollUntil(const std::function<bool()>& done, bool sender_only = false) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
      sender_->PollCompletion();
      if (sender_only) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        continue;
      }
      try {
        door_->PollCompletion();
      } catch (const std::runtime_error&) {
        ++door_errors_;
      }
      if (std::chrono::steady_clock::now() > deadline) return false;
    }
    return true;
  }

  static constexpr size_t kSlotSize = 65536;
  static constexpr size_t kBufferSize = 16 * kSlotSize;
  std::vector<FiInfoPtr> nics_;
  std::unique_ptr<FrontDoorNetwork> door_;
  std::unique_ptr<Network> sender_;
  std::unique_ptr<Buffer> buffer_;
  MemoryRegion region_;
  fi_addr_t door_in_sender_ = FI_ADDR_UNSPEC;
  size_t sending_ = 0;
  size_t door_errors_ = 0;
  std::vector<std::vector<uint8_t>> messages_;
  std::vector<std::string> dropped_;
};

// The front door's replies rest on this: over tcp a send to an address
// where nobody listens is never taken (rxm answers -FI_EAGAIN while it
// connects), and TrySendNow then leaves nothing behind; a send to a peer
// that sent to the door goes out over the connection it made.
TEST_F(TcpFrontDoorTest, TrySendNowTakesOnlyWhatTheProviderTakesAtOnce) {
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(probe, 0);
  sockaddr_in free_port{};
  free_port.sin_family = AF_INET;
  free_port.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(free_port);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&free_port), sizeof(free_port)), 0);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&free_port), &length), 0);
  close(probe);  // nobody listens there now
  std::vector<uint8_t> nobody = sender_->address();
  ASSERT_GE(nobody.size(), sizeof(sockaddr_in));
  std::memcpy(nobody.data() + offsetof(sockaddr_in, sin_port), &free_port.sin_port,
              sizeof(free_port.sin_port));

  static char reply[64] = "reply";
  size_t called_back = 0;
  auto count = [&called_back](Network&, RdmaOp&) { ++called_back; };
  fi_addr_t forged = door_->AddPeer(nobody);
  for (int offer = 0; offer < 20; ++offer) {
    EXPECT_FALSE(door_->TrySendNow(forged, reply, sizeof(reply), nullptr, count));
    EXPECT_EQ(door_->pending(), 0u);
    door_->PollCompletion();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(called_back, 0u) << "nothing was posted";

  Send(1, 64);
  ASSERT_TRUE(PollUntil([this] { return sending_ == 0; }));
  fi_addr_t sender = door_->AddPeer(sender_->address());
  bool taken = false;
  for (int offer = 0; offer < 100 && !taken; ++offer) {
    taken = door_->TrySendNow(sender, reply, sizeof(reply), nullptr, count);
    door_->PollCompletion();
  }
  EXPECT_TRUE(taken) << "a sender's own address is reached over its connection";
  EXPECT_TRUE(PollUntil([&called_back] { return called_back == 1; }));
}

TEST_F(TcpFrontDoorTest, BufferedExactlyOnLibfabric1) {
  bool libfabric1 = FI_MAJOR(fi_version()) == 1;
  EXPECT_EQ(door_->receive_mode() == FrontDoorNetwork::ReceiveMode::kBuffered, libfabric1)
      << "libfabric " << FI_MAJOR(fi_version()) << "." << FI_MINOR(fi_version()) << ", provider "
      << door_->info().fabric_attr->prov_name;
}

// Many more messages than rxm keeps buffers posted: each buffer came back.
TEST_F(TcpFrontDoorTest, EveryMessageArrivesWholeAndItsBufferComesBack) {
  if (door_->receive_mode() != FrontDoorNetwork::ReceiveMode::kBuffered) {
    GTEST_SKIP() << "posted receives here (libfabric 2.x)";
  }
  constexpr size_t kCount = 200, kLength = 162;  // a CONNECT's size
  Send(kCount, kLength);
  ASSERT_TRUE(PollUntil([&] { return messages_.size() == kCount && sending_ == 0; }))
      << messages_.size() << " of " << kCount << " arrived";
  for (size_t m = 0; m < kCount; ++m) {
    ASSERT_EQ(messages_[m].size(), kLength);
    for (size_t i = 0; i < kLength; ++i) {
      ASSERT_EQ(messages_[m][i], static_cast<uint8_t>(m + i)) << "message " << m << " byte " << i;
    }
  }
  EXPECT_TRUE(dropped_.empty()) << dropped_.front();
}

// A message longer than rxm's buffers is not taken: one line, its buffer
// goes back, and the next message still arrives.
TEST_F(TcpFrontDoorTest, ALongMessageIsDroppedAndTheNextArrives) {
  if (door_->receive_mode() != FrontDoorNetwork::ReceiveMode::kBuffered) {
    GTEST_SKIP() << "posted receives here (libfabric 2.x)";
  }
  ASSERT_GT(door_->buffered_limit(), kMessageHeaderSize);
  const size_t longer = door_->buffered_limit() + 1000;
  ASSERT_LE(longer, kSlotSize);
  Send(1, longer);
  ASSERT_TRUE(PollUntil([&] { return !dropped_.empty(); })) << "no word of the long message";
  EXPECT_NE(dropped_[0].find(std::to_string(longer) + " bytes"), std::string::npos) << dropped_[0];
  Send(20, 100);
  ASSERT_TRUE(PollUntil([&] { return messages_.size() == 20; }))
      << messages_.size() << " of 20 arrived";
  EXPECT_EQ(messages_[0].size(), 100u);
  EXPECT_EQ(dropped_.size(), 1u) << dropped_.back();
}

// Handling a message throws: its buffer, and those of the messages read
// with it, still go back (rxm keeps only 8): later, one read again takes
// several messages. The messages are sent while the front door does not
// read, so that one read finds several.
TEST_F(TcpFrontDoorTest, BuffersGoBackWhenHandlingAMessageFails) {
  if (door_->receive_mode() != FrontDoorNetwork::ReceiveMode::kBuffered) {
    GTEST_SKIP() << "posted receives here (libfabric 2.x)";
  }
  bool fail = true;
  door_->OnMessage(
      [&](const uint8_t* data, size_t length) {
        if (fail) throw std::runtime_error("handling failed");
        messages_.emplace_back(data, data + length);
      },
      [this](const std::string& why) { dropped_.push_back(why); });
  Send(1, 100);  // connected
  ASSERT_TRUE(PollUntil([&] { return door_errors_ == 1 && sending_ == 0; }));
  Send(64, 100, /*quietly=*/true);
  ASSERT_TRUE(PollUntil([&] { return sending_ == 0; }, /*sender_only=*/true));
  ASSERT_TRUE(PollUntil([&] { return door_errors_ >= 8; })) << door_errors_ << " errors";
  fail = false;
  ReadSizes reads;
  door_->hooks = &reads;
  Send(64, 120, /*quietly=*/true);
  ASSERT_TRUE(PollUntil([&] { return sending_ == 0; }, /*sender_only=*/true));
  auto later = [&] {
    size_t n = 0;
    for (const auto& message : messages_) n += message.size() == 120;
    return n;
  };
  ASSERT_TRUE(PollUntil([&] { return later() == 64; })) << later() << " of 64 arrived";
  door_->hooks = nullptr;
  EXPECT_GE(reads.most, 2u) << "rxm lent one buffer at a time: the others never came back";
  EXPECT_TRUE(dropped_.empty()) << dropped_.front();
}

}  // namespace
}  // namespace tutorial
