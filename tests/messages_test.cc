// The CONNECT and RANDOM_FILL wire format: round trips, and every way a
// message from the network can lie about itself.
#include "common/messages.h"

#include <gtest/gtest.h>

#include "common/errors.h"

namespace tutorial {
namespace {

ConnectMessage SampleConnect(uint32_t gpus = 2, uint32_t nics = 2, uint32_t bufs = 2) {
  ConnectMessage m;
  m.num_gpus = gpus;
  m.nics_per_gpu = nics;
  m.buffers_per_gpu = bufs;
  for (uint32_t i = 0; i < gpus * nics; ++i) {
    // Addresses of different lengths, as shm names can be.
    m.nic_addresses.push_back(std::vector<uint8_t>(16 + i, static_cast<uint8_t>(i)));
    for (uint32_t b = 0; b < bufs; ++b) {
      m.regions.push_back(RemoteRegion{0x10000000ull * (i + 1) + b * 0x1000000, 1 << 20, 42 + i});
    }
  }
  return m;
}

RandomFillRequest SampleRequest() {
  RandomFillRequest r;
  r.cookie = 0xC00C1E5C00C1E5ull;
  r.remote_context = 0xDEADBEEF;
  r.seed = 1234;
  r.page_size = 4096;
  r.page_indices = {3, 1, 200, 0, 255};
  return r;
}

ServerLayout SampleServer() { return ServerLayout{2, 2, 2, 1 << 20}; }

size_t BodyOffset(const std::vector<uint8_t>& bytes) {
  return DecodeHeader(bytes.data(), bytes.size()).body_offset;
}

Session SampleSession() { return Session{0x0123456789ABCDEFull, std::vector<uint8_t>(18, 's')}; }

TEST(MessagesTest, EveryMessageCarriesItsSession) {
  const Session session = SampleSession();
  for (auto bytes : {Encode(SampleConnect(), session), Encode(SampleRequest(), session),
                     Encode(CancelMessage{7}, session), EncodeEmpty(MessageType::kProbe, session),
                     Encode(BusyMessage{"x"}, Session{session.nonce, {}})}) {
    MessageHeader header = DecodeHeader(bytes.data(), bytes.size());
    EXPECT_EQ(header.session.nonce, session.nonce);
    EXPECT_LE(header.body_offset, bytes.size());
  }
  std::vector<uint8_t> connect = Encode(SampleConnect(), session);
  EXPECT_EQ(DecodeHeader(connect.data(), connect.size()).session, session);
  EXPECT_EQ(DecodeConnect(connect.data(), connect.size()).nic_addresses,
            SampleConnect().nic_addresses);
  std::vector<uint8_t> probe = EncodeEmpty(MessageType::kProbe, session);
  EXPECT_EQ(PeekMessageType(probe.data(), probe.size()), MessageType::kProbe);
  EXPECT_EQ(BodyOffset(probe), probe.size());
}

TEST(MessagesTest, AClientMessageMustNameASession) {
  for (const Session& none : {Session{}, Session{5, {}}, Session{0, {1, 2, 3}}}) {
    std::vector<uint8_t> bytes = Encode(SampleRequest(), none);
    EXPECT_THROW(CheckClientSession(DecodeHeader(bytes.data(), bytes.size())), ProtocolError);
  }
  std::vector<uint8_t> bytes = Encode(SampleRequest(), SampleSession());
  EXPECT_NO_THROW(CheckClientSession(DecodeHeader(bytes.data(), bytes.size())));
}

TEST(MessagesTest, ASessionAddressThatLiesAboutItsLengthIsRejected) {
  std::vector<uint8_t> bytes = Encode(SampleRequest(), SampleSession());
  bytes[kMessageHeaderSize + 8] = 0xFF;  // address length 0x..FF, past the message
  EXPECT_THROW(DecodeHeader(bytes.data(), bytes.size()), ProtocolError);
  bytes[kMessageHeaderSize + 9] = 0x7F;  // longer than any address
  EXPECT_THROW(DecodeHeader(bytes.data(), bytes.size()), ProtocolError);
}

TEST(MessagesTest, ConnectRoundTrip) {
  ConnectMessage m = SampleConnect();
  std::vector<uint8_t> bytes = Encode(m);
  EXPECT_EQ(PeekMessageType(bytes.data(), bytes.size()), MessageType::kConnect);
  ConnectMessage d = DecodeConnect(bytes.data(), bytes.size());
  EXPECT_EQ(d.num_gpus, 2u);
  EXPECT_EQ(d.nic_addresses, m.nic_addresses);
  ASSERT_EQ(d.regions.size(), m.regions.size());
  EXPECT_EQ(d.region(1, 1, 1).addr, m.region(1, 1, 1).addr);
  EXPECT_EQ(d.region(1, 0, 1).key, m.region(1, 0, 1).key);
  EXPECT_NO_THROW(CheckConnectFitsServer(d, SampleServer()));
}

TEST(MessagesTest, EfaSizedAddressesRoundTrip) {
  ConnectMessage m = SampleConnect(8, 4, 2);
  for (auto& a : m.nic_addresses) a.assign(32, 0xEF);  // EFA: 32 bytes
  std::vector<uint8_t> bytes = Encode(m);
  ConnectMessage d = DecodeConnect(bytes.data(), bytes.size());
  EXPECT_EQ(d.num_nics(), 32u);
  EXPECT_EQ(d.nic_addresses[31].size(), 32u);
}

TEST(MessagesTest, RandomFillRoundTrip) {
  RandomFillRequest r = SampleRequest();
  std::vector<uint8_t> bytes = Encode(r);
  EXPECT_EQ(PeekMessageType(bytes.data(), bytes.size()), MessageType::kRandomFill);
  RandomFillRequest d = DecodeRandomFill(bytes.data(), bytes.size());
  EXPECT_EQ(d.cookie, r.cookie);
  EXPECT_EQ(d.remote_context, r.remote_context);
  EXPECT_EQ(d.seed, r.seed);
  EXPECT_EQ(d.page_size, r.page_size);
  EXPECT_EQ(d.page_indices, r.page_indices);
  EXPECT_NO_THROW(CheckRequestFits(d, SampleConnect(), SampleServer()));
}

TEST(MessagesTest, EveryTruncationIsRejected) {
  for (auto bytes : {Encode(SampleConnect()), Encode(SampleRequest())}) {
    for (size_t len = 0; len < bytes.size(); ++len) {
      EXPECT_THROW(
          {
            if (PeekMessageType(bytes.data(), len) == MessageType::kConnect) {
              DecodeConnect(bytes.data(), len);
            } else {
              DecodeRandomFill(bytes.data(), len);
            }
          },
          ProtocolError)
          << "length " << len;
    }
  }
}

TEST(MessagesTest, TrailingBytesAreRejected) {
  std::vector<uint8_t> bytes = Encode(SampleRequest());
  bytes.push_back(0);
  EXPECT_THROW(DecodeRandomFill(bytes.data(), bytes.size()), ProtocolError);
}

TEST(MessagesTest, BadMagicAndTypeAreRejected) {
  std::vector<uint8_t> bytes = Encode(SampleRequest());
  std::vector<uint8_t> bad_magic = bytes;
  bad_magic[0] ^= 0xFF;
  EXPECT_THROW(PeekMessageType(bad_magic.data(), bad_magic.size()), ProtocolError);
  std::vector<uint8_t> bad_type = bytes;
  bad_type[4] = 99;
  EXPECT_THROW(PeekMessageType(bad_type.data(), bad_type.size()), ProtocolError);
  EXPECT_THROW(DecodeConnect(bytes.data(), bytes.size()), ProtocolError);  // wrong type
}

TEST(MessagesTest, InconsistentPageCountIsRejected) {
  std::vector<uint8_t> bytes = Encode(SampleRequest());
  bytes[BodyOffset(bytes) + 8 + 4 + 8 + 8] = 6;  // announces 6 pages, carries 5
  EXPECT_THROW(DecodeRandomFill(bytes.data(), bytes.size()), ProtocolError);
}

TEST(MessagesTest, HugeLayoutIsRejectedBeforeAllocating) {
  ConnectMessage m = SampleConnect(1, 1, 1);
  std::vector<uint8_t> bytes = Encode(m);
  size_t body = BodyOffset(bytes);
  bytes[body] = 0xFF;  // num_gpus = 0x...FF
  bytes[body + 1] = 0xFF;
  bytes[body + 2] = 0xFF;
  EXPECT_THROW(DecodeConnect(bytes.data(), bytes.size()), ProtocolError);
}

TEST(MessagesTest, ZeroLengthAddressIsRejected) {
  ConnectMessage m = SampleConnect(1, 1, 1);
  m.nic_addresses[0].clear();
  std::vector<uint8_t> bytes = Encode(m);
  EXPECT_THROW(DecodeConnect(bytes.data(), bytes.size()), ProtocolError);
}

TEST(MessagesTest, LayoutMismatchIsRejected) {
  ConnectMessage m = SampleConnect(1, 2, 2);
  EXPECT_THROW(CheckConnectFitsServer(m, SampleServer()), ProtocolError);
}

TEST(MessagesTest, WrappingRegionIsRejected) {
  ConnectMessage m = SampleConnect();
  m.regions[3].addr = ~0ull - 10;
  EXPECT_THROW(CheckConnectFitsServer(m, SampleServer()), ProtocolError);
}

TEST(MessagesTest, RequestsThatDoNotFitAreRejected) {
  ConnectMessage c = SampleConnect();  // regions of 1 MiB: 256 slots of 4 KiB
  RandomFillRequest r = SampleRequest();

  r.page_size = 0;
  EXPECT_THROW(CheckRequestFits(r, c, SampleServer()), ProtocolError);
  r.page_size = 4100;  // not a multiple of 8
  EXPECT_THROW(CheckRequestFits(r, c, SampleServer()), ProtocolError);

  r = SampleRequest();
  r.page_indices.push_back(256);  // one past the last slot
  EXPECT_THROW(CheckRequestFits(r, c, SampleServer()), ProtocolError);

  r = SampleRequest();
  r.page_indices.push_back(3);  // repeats
  EXPECT_THROW(CheckRequestFits(r, c, SampleServer()), ProtocolError);

  r = SampleRequest();
  ServerLayout small = SampleServer();
  small.buffer_size = 4 * 4096;  // server holds 4 pages, request has 5
  EXPECT_THROW(CheckRequestFits(r, c, small), ProtocolError);

  r = SampleRequest();
  c.regions[5].size = 4096 * 100;  // one smaller region: slot 200 lands outside
  EXPECT_THROW(CheckRequestFits(r, c, SampleServer()), ProtocolError);
}

TEST(MessagesTest, BusyRoundTripAndIsNotAReject) {
  std::vector<uint8_t> bytes = Encode(BusyMessage{"serving another client"});
  EXPECT_EQ(PeekMessageType(bytes.data(), bytes.size()), MessageType::kBusy);
  EXPECT_EQ(DecodeBusy(bytes.data(), bytes.size()).reason, "serving another client");
  EXPECT_THROW(DecodeReject(bytes.data(), bytes.size()), ProtocolError);
}

TEST(MessagesTest, ChallengeRoundTripAndOnlyTheServerSendsIt) {
  const Session reply{SampleSession().nonce, {}};
  std::vector<uint8_t> bytes = Encode(ChallengeMessage{0xFEEDull}, reply);
  EXPECT_EQ(PeekMessageType(bytes.data(), bytes.size()), MessageType::kChallenge);
  EXPECT_EQ(DecodeChallenge(bytes.data(), bytes.size()).cookie, 0xFEEDull);
  EXPECT_EQ(DecodeHeader(bytes.data(), bytes.size()).session.nonce, reply.nonce);
  EXPECT_THROW(DecodeBusy(bytes.data(), bytes.size()), ProtocolError);
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_THROW(DecodeChallenge(bytes.data(), len), ProtocolError) << len;
  }
  std::vector<uint8_t> zero = Encode(ChallengeMessage{0}, reply);
  EXPECT_THROW(DecodeChallenge(zero.data(), zero.size()), ProtocolError);
  // A peer sending one to the server names a session, and is still refused.
  std::vector<uint8_t> forged = Encode(ChallengeMessage{1}, SampleSession());
  EXPECT_THROW(CheckClientSession(DecodeHeader(forged.data(), forged.size())), ProtocolError);
}

TEST(MessagesTest, UnpredictableNumbersAreNotZeroAndDiffer) {
  uint64_t first = UnpredictableNonZero64();
  EXPECT_NE(first, 0u);
  bool differ = false;
  for (int i = 0; i < 4 && !differ; ++i) differ = UnpredictableNonZero64() != first;
  EXPECT_TRUE(differ);
}

TEST(MessagesTest, RejectRoundTripAndSanitising) {
  std::vector<uint8_t> bytes = Encode(RejectMessage{"too big\n\x01"});
  EXPECT_EQ(PeekMessageType(bytes.data(), bytes.size()), MessageType::kReject);
  EXPECT_EQ(DecodeReject(bytes.data(), bytes.size()).reason, "too big??");
  bytes.pop_back();
  EXPECT_THROW(DecodeReject(bytes.data(), bytes.size()), ProtocolError);
}

TEST(MessagesTest, HexRoundTripAndErrors) {
  std::vector<uint8_t> bytes = {0x00, 0x7f, 0x80, 0xff, 0x12};
  EXPECT_EQ(ToHex(bytes), "007f80ff12");
  EXPECT_EQ(FromHex("007F80fF12"), bytes);
  EXPECT_THROW(FromHex(""), UsageError);
  EXPECT_THROW(FromHex("abc"), UsageError);
  EXPECT_THROW(FromHex("zz"), UsageError);
  EXPECT_THROW(FromHex(std::string(2 * (kMaxAddressLength + 1), 'a')), UsageError);
}

}  // namespace
}  // namespace tutorial
