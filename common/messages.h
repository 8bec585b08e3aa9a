// The RANDOM_FILL protocol's two messages, their wire format, and every
// check the server makes before it trusts them.
//
// Wire format (little-endian):
//   header   u32 magic "RFL3", u32 type, u32 length of what follows,
//            u64 session nonce, u16 address length, address bytes
//            (the session: a random nonce the client chose, plus the
//            client's NIC 0 address, where replies go; the server's
//            replies echo the client's session with no address)
//   CONNECT  u32 gpus, u32 nics_per_gpu, u32 buffers_per_gpu,
//            per NIC:  u16 address length, address bytes
//            per (gpu, nic, buffer): u64 addr, u64 size, u64 key
//   CHALLENGE
//            u64 cookie: the server's answer to a CONNECT it keeps, one to
//            every address the CONNECT declares (the session's and each
//            NIC's), each with a random number only a receiver at that
//            address learns
//   RANDOM_FILL
//            u64 cookie (the XOR of the CHALLENGEs' cookies), u32
//            remote_context, u64 seed,
//            u64 page_size, u64 num_pages, num_pages x u32 page index
//   REJECT   u16 length, reason (UTF-8): the server's answer to a request it
//            will not serve, so the client can say why instead of timing out
//   BUSY     u16 length, reason: the server is serving another client or
//            recovering; the client asks again later (same body as REJECT)
//   CANCEL   u32 remote_context: a client stopped while its transfer runs
//            says so, and the server ends that transfer at once instead of
//            waiting for its stall timeout (no provider tells it otherwise)
//   PROBE    (no body): a client waiting for its writes asks whether the
//            server still lives; ALIVE (no body) is the answer, sent even
//            while the server is busy (tcp and efa tell no client that its
//            server died)
// The server pairs a RANDOM_FILL with the CONNECT of the same session
// only when it carries the cookies the server sent to every address that
// CONNECT declares, and answers only the session's address (docs/protocol.md says why that is the
// address a provider lets it answer, and what the cookie proves).
// Endpoint addresses carry their own length: EFA's are 32 bytes, shm's are
// names, tcp's are socket addresses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tutorial {

enum class MessageType : uint32_t {
  kConnect = 1,
  kRandomFill = 2,
  kReject = 3,
  kBusy = 4,
  kCancel = 5,
  kProbe = 6,
  kAlive = 7,
  kChallenge = 8
};

constexpr uint32_t kMessageMagic = 0x334C4652;  // "RFL3" read as little-endian bytes
// The fixed start of the header: magic, type, and the length of the rest.
constexpr size_t kMessageHeaderSize = 12;
// The server's receive buffers; anything longer arrives truncated and is
// rejected. Enough for 262,000 page indices.
constexpr size_t kMaxMessageSize = 1 << 20;
constexpr size_t kMaxAddressLength = 256;
constexpr uint32_t kMaxGpus = 1024;
constexpr uint32_t kMaxNicsPerGpu = 64;
constexpr uint32_t kMaxBuffersPerGpu = 16;

// Who a message is about: the client's nonce and its NIC 0 address. A
// client's messages carry both; a server's reply carries the nonce only.
struct Session {
  uint64_t nonce = 0;
  std::vector<uint8_t> address;

  bool operator==(const Session& o) const { return nonce == o.nonce && address == o.address; }
  bool operator!=(const Session& o) const { return !(*this == o); }
  bool operator<(const Session& o) const {
    return nonce != o.nonce ? nonce < o.nonce : address < o.address;
  }
};

// A message's header: its type and session, and where its body starts.
struct MessageHeader {
  MessageType type = MessageType::kConnect;
  Session session;
  size_t body_offset = 0;
};

// A peer's registered memory: where to write, how much is there, which key.
struct RemoteRegion {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t key = 0;
};

struct ConnectMessage {
  uint32_t num_gpus = 0;
  uint32_t nics_per_gpu = 0;
  uint32_t buffers_per_gpu = 0;
  std::vector<std::vector<uint8_t>> nic_addresses;  // num_gpus * nics_per_gpu
  std::vector<RemoteRegion> regions;                // (gpu, nic, buffer) order

  size_t num_nics() const { return size_t{num_gpus} * nics_per_gpu; }
  // Region of `buffer` of `gpu` as registered on the GPU's NIC `nic`.
  const RemoteRegion& region(size_t gpu, size_t nic, size_t buffer) const {
    return regions[(gpu * nics_per_gpu + nic) * buffers_per_gpu + buffer];
  }
};

struct RandomFillRequest {
  uint64_t cookie = 0;  // the XOR of the CHALLENGEs' cookies, one sent to each declared address
  uint32_t remote_context = 0;
  uint64_t seed = 0;
  uint64_t page_size = 0;
  std::vector<uint32_t> page_indices;  // slot of page j in the client's buffers

  uint64_t num_pages() const { return page_indices.size(); }
};

struct RejectMessage {
  std::string reason;
};
constexpr size_t kMaxRejectReason = 1024;
struct CancelMessage {
  uint32_t remote_context = 0;
};
// The server's answer to a CONNECT that arrives while it serves another
// client or recovers: nothing is wrong with the request, ask again later.
struct BusyMessage {
  std::string reason;
};
// The server's answer to a CONNECT it keeps, one to each address it
// declares: a cookie that the session's RANDOM_FILL must carry (XORed with
// the others). Never 0.
struct ChallengeMessage {
  uint64_t cookie = 0;
};
// A REJECT that arrives during a transfer: the server gave it up and says
// why (the reason follows this prefix), so the client need not wait for
// its timeout.
constexpr char kTransferAbandonedReason[] = "transfer abandoned: ";

std::vector<uint8_t> Encode(const ConnectMessage& message, const Session& session = {});
std::vector<uint8_t> Encode(const RejectMessage& message, const Session& session = {});
std::vector<uint8_t> Encode(const RandomFillRequest& message, const Session& session = {});
std::vector<uint8_t> Encode(const BusyMessage& message, const Session& session = {});
std::vector<uint8_t> Encode(const CancelMessage& message, const Session& session = {});
std::vector<uint8_t> Encode(const ChallengeMessage& message, const Session& session = {});
// PROBE or ALIVE: a header alone.
std::vector<uint8_t> EncodeEmpty(MessageType type, const Session& session);

// Decoders check the header, every length against the bytes received, and
// the message's own consistency. They throw ProtocolError in one line.
MessageHeader DecodeHeader(const uint8_t* data, size_t length);
MessageType PeekMessageType(const uint8_t* data, size_t length);
// A client's message must be one a client sends (CONNECT, RANDOM_FILL,
// CANCEL, PROBE) and name a session: a nonce other than 0 and an address.
// Throws ProtocolError.
void CheckClientSession(const MessageHeader& header);
ConnectMessage DecodeConnect(const uint8_t* data, size_t length);
RandomFillRequest DecodeRandomFill(const uint8_t* data, size_t length);
RejectMessage DecodeReject(const uint8_t* data, size_t length);
BusyMessage DecodeBusy(const uint8_t* data, size_t length);
CancelMessage DecodeCancel(const uint8_t* data, size_t length);
// Throws ProtocolError for a cookie of 0 (the server never picks it).
ChallengeMessage DecodeChallenge(const uint8_t* data, size_t length);

// A random 64-bit number other than 0, from the kernel's random source
// (getrandom): a session's nonce, a CHALLENGE's cookie. Throws
// RuntimeError when the kernel gives none.
uint64_t UnpredictableNonZero64();

// What the server is: its layout and buffer size.
struct ServerLayout {
  uint32_t num_gpus = 0;
  uint32_t nics_per_gpu = 0;
  uint32_t buffers_per_gpu = 0;
  uint64_t buffer_size = 0;
};

// Checks a decoded CONNECT against the server's layout (counts must match,
// as must the numbers of addresses and regions; regions must be non-empty
// and not wrap around). Throws ProtocolError.
void CheckConnectFitsServer(const ConnectMessage& connect, const ServerLayout& server);

// Checks a request against the server and the client's regions (call it
// after CheckConnectFitsServer): page size and count, the server's buffers
// hold the pages, every index is a distinct slot and every page lands
// inside every region it may target: for any region r and index i,
// [r.addr + i * page_size, r.addr + (i + 1) * page_size) lies within
// [r.addr, r.addr + r.size) without overflow. Throws ProtocolError.
void CheckRequestFits(const RandomFillRequest& request, const ConnectMessage& connect,
                      const ServerLayout& server);

// Hex form of an endpoint address, as printed by the server and passed to
// the client's --server flag.
std::string ToHex(const std::vector<uint8_t>& bytes);
// Throws UsageError for an empty, odd-length, non-hex or over-long string.
std::vector<uint8_t> FromHex(const std::string& hex);

}  // namespace tutorial
