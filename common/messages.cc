#include "common/messages.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/errors.h"

namespace tutorial {
namespace {

class ByteWriter {
 public:
  void U16(uint16_t v) { Little(v, 2); }
  void U32(uint32_t v) { Little(v, 4); }
  void U64(uint64_t v) { Little(v, 8); }
  void Bytes(const std::vector<uint8_t>& b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<uint8_t> Finish(MessageType type, const Session& session) {
    std::vector<uint8_t> message;
    ByteWriter header;
    header.U32(kMessageMagic);
    header.U32(static_cast<uint32_t>(type));
    size_t address = std::min(session.address.size(), kMaxAddressLength);
    header.U32(static_cast<uint32_t>(8 + 2 + address + out_.size()));
    header.U64(session.nonce);
    header.U16(static_cast<uint16_t>(address));
    header.out_.insert(header.out_.end(), session.address.begin(),
                       session.address.begin() + static_cast<std::ptrdiff_t>(address));
    message = std::move(header.out_);
    message.insert(message.end(), out_.begin(), out_.end());
    return message;
  }

 private:
  void Little(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

// Reads fields and refuses to step past the bytes that actually arrived.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t length, const char* what)
      : data_(data), length_(length), what_(what) {}
  uint16_t U16() { return static_cast<uint16_t>(Little(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Little(4)); }
  uint64_t U64() { return Little(8); }
  std::vector<uint8_t> Bytes(size_t n) {
    Need(n);
    std::vector<uint8_t> b(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return b;
  }
  size_t remaining() const { return length_ - pos_; }
  void ExpectEnd() const {
    if (pos_ != length_) {
      throw ProtocolError(std::string(what_) + ": " + std::to_string(length_ - pos_) +
                          " unexpected trailing bytes");
    }
  }

 private:
  void Need(size_t n) const {
    if (n > length_ - pos_) {
      throw ProtocolError(std::string(what_) + ": truncated (needs " + std::to_string(n) +
                          " more bytes at offset " + std::to_string(pos_) + ", has " +
                          std::to_string(length_ - pos_) + ")");
    }
  }
  uint64_t Little(int n) {
    Need(static_cast<size_t>(n));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{data_[pos_ + i]} << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  const uint8_t* data_;
  size_t length_;
  size_t pos_ = 0;
  const char* what_;
};

// Returns a reader positioned on the body after checking the header.
ByteReader OpenBody(const uint8_t* data, size_t length, MessageType expected, const char* what) {
  MessageHeader header = DecodeHeader(data, length);
  if (header.type != expected) throw ProtocolError(std::string(what) + ": wrong message type");
  return ByteReader(data + header.body_offset, length - header.body_offset, what);
}

}  // namespace

std::vector<uint8_t> Encode(const ConnectMessage& m, const Session& session) {
  ByteWriter w;
  w.U32(m.num_gpus);
  w.U32(m.nics_per_gpu);
  w.U32(m.buffers_per_gpu);
  for (const auto& address : m.nic_addresses) {
    w.U16(static_cast<uint16_t>(address.size()));
    w.Bytes(address);
  }
  for (const auto& region : m.regions) {
    w.U64(region.addr);
    w.U64(region.size);
    w.U64(region.key);
  }
  return w.Finish(MessageType::kConnect, session);
}

std::vector<uint8_t> Encode(const RandomFillRequest& m, const Session& session) {
  ByteWriter w;
  w.U64(m.cookie);
  w.U32(m.remote_context);
  w.U64(m.seed);
  w.U64(m.page_size);
  w.U64(m.page_indices.size());
  for (uint32_t index : m.page_indices) w.U32(index);
  return w.Finish(MessageType::kRandomFill, session);
}

namespace {
std::vector<uint8_t> EncodeReason(const std::string& text, MessageType type,
                                  const Session& session) {
  ByteWriter w;
  std::string reason = text.substr(0, kMaxRejectReason);
  w.U16(static_cast<uint16_t>(reason.size()));
  w.Bytes(std::vector<uint8_t>(reason.begin(), reason.end()));
  return w.Finish(type, session);
}

std::string DecodeReason(const uint8_t* data, size_t length, MessageType type, const char* what) {
  ByteReader r = OpenBody(data, length, type, what);
  uint16_t len = r.U16();
  if (len > kMaxRejectReason) throw ProtocolError(std::string(what) + ": reason too long");
  std::vector<uint8_t> text = r.Bytes(len);
  r.ExpectEnd();
  std::string reason;
  for (uint8_t c : text) reason.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  return reason;
}
}  // namespace

std::vector<uint8_t> Encode(const RejectMessage& m, const Session& session) {
  return EncodeReason(m.reason, MessageType::kReject, session);
}

std::vector<uint8_t> Encode(const CancelMessage& m, const Session& session) {
  ByteWriter w;
  w.U32(m.remote_context);
  return w.Finish(MessageType::kCancel, session);
}

std::vector<uint8_t> Encode(const BusyMessage& m, const Session& session) {
  return EncodeReason(m.reason, MessageType::kBusy, session);
}

std::vector<uint8_t> Encode(const ChallengeMessage& m, const Session& session) {
  ByteWriter w;
  w.U64(m.cookie);
  return w.Finish(MessageType::kChallenge, session);
}

std::vector<uint8_t> EncodeEmpty(MessageType type, const Session& session) {
  return ByteWriter().Finish(type, session);
}

MessageType PeekMessageType(const uint8_t* data, size_t length) {
  return DecodeHeader(data, length).type;
}

void CheckClientSession(const MessageHeader& header) {
  if (header.type == MessageType::kReject || header.type == MessageType::kBusy ||
      header.type == MessageType::kAlive || header.type == MessageType::kChallenge) {
    throw ProtocolError(
        "unexpected REJECT, BUSY, ALIVE or CHALLENGE (only the server sends those)");
  }
  if (header.session.nonce == 0 || header.session.address.empty()) {
    throw ProtocolError("message names no session (a nonce and the sender's address)");
  }
}

MessageHeader DecodeHeader(const uint8_t* data, size_t length) {
  if (length < kMessageHeaderSize) {
    throw ProtocolError("message of " + std::to_string(length) + " bytes is shorter than a header");
  }
  ByteReader header(data, kMessageHeaderSize, "header");
  uint32_t magic = header.U32();
  uint32_t type = header.U32();
  uint32_t body = header.U32();
  if (magic != kMessageMagic) throw ProtocolError("message does not start with the RFL3 magic");
  if (body != length - kMessageHeaderSize) {
    throw ProtocolError("header announces " + std::to_string(body) + " body bytes, " +
                        std::to_string(length - kMessageHeaderSize) + " arrived");
  }
  if (type < static_cast<uint32_t>(MessageType::kConnect) ||
      type > static_cast<uint32_t>(MessageType::kChallenge)) {
    throw ProtocolError("unknown message type " + std::to_string(type));
  }
  MessageHeader h;
  h.type = static_cast<MessageType>(type);
  ByteReader session(data + kMessageHeaderSize, length - kMessageHeaderSize, "header");
  h.session.nonce = session.U64();
  uint16_t address = session.U16();
  if (address > kMaxAddressLength) {
    throw ProtocolError("header: sender address of " + std::to_string(address) + " bytes");
  }
  h.session.address = session.Bytes(address);
  h.body_offset = length - session.remaining();
  return h;
}

ConnectMessage DecodeConnect(const uint8_t* data, size_t length) {
  ByteReader r = OpenBody(data, length, MessageType::kConnect, "CONNECT");
  ConnectMessage m;
  m.num_gpus = r.U32();
  m.nics_per_gpu = r.U32();
  m.buffers_per_gpu = r.U32();
  if (m.num_gpus == 0 || m.num_gpus > kMaxGpus || m.nics_per_gpu == 0 ||
      m.nics_per_gpu > kMaxNicsPerGpu || m.buffers_per_gpu == 0 ||
      m.buffers_per_gpu > kMaxBuffersPerGpu) {
    throw ProtocolError("CONNECT: layout out of range (" + std::to_string(m.num_gpus) + " GPUs, " +
                        std::to_string(m.nics_per_gpu) + " NICs per GPU, " +
                        std::to_string(m.buffers_per_gpu) + " buffers per GPU)");
  }
  size_t nics = m.num_nics();
  m.nic_addresses.reserve(nics);
  for (size_t i = 0; i < nics; ++i) {
    uint16_t len = r.U16();
    if (len == 0 || len > kMaxAddressLength) {
      throw ProtocolError("CONNECT: NIC " + std::to_string(i) + " address length " +
                          std::to_string(len) + " out of range");
    }
    m.nic_addresses.push_back(r.Bytes(len));
  }
  size_t regions = nics * m.buffers_per_gpu;
  if (r.remaining() != regions * 24) {
    throw ProtocolError("CONNECT: " + std::to_string(r.remaining()) +
                        " bytes of regions, expected " + std::to_string(regions * 24));
  }
  m.regions.resize(regions);
  for (auto& region : m.regions) {
    region.addr = r.U64();
    region.size = r.U64();
    region.key = r.U64();
  }
  r.ExpectEnd();
  return m;
}

RandomFillRequest DecodeRandomFill(const uint8_t* data, size_t length) {
  ByteReader r = OpenBody(data, length, MessageType::kRandomFill, "RANDOM_FILL");
  RandomFillRequest m;
  m.cookie = r.U64();
  m.remote_context = r.U32();
  m.seed = r.U64();
  m.page_size = r.U64();
  uint64_t num_pages = r.U64();
  if (num_pages == 0 || num_pages != r.remaining() / 4 || r.remaining() % 4 != 0) {
    throw ProtocolError("RANDOM_FILL: announces " + std::to_string(num_pages) +
                        " pages but carries " + std::to_string(r.remaining()) +
                        " bytes of indices");
  }
  m.page_indices.resize(num_pages);
  for (auto& index : m.page_indices) index = r.U32();
  r.ExpectEnd();
  return m;
}

RejectMessage DecodeReject(const uint8_t* data, size_t length) {
  return RejectMessage{DecodeReason(data, length, MessageType::kReject, "REJECT")};
}

CancelMessage DecodeCancel(const uint8_t* data, size_t length) {
  ByteReader r = OpenBody(data, length, MessageType::kCancel, "CANCEL");
  CancelMessage m;
  m.remote_context = r.U32();
  r.ExpectEnd();
  return m;
}

ChallengeMessage DecodeChallenge(const uint8_t* data, size_t length) {
  ByteReader r = OpenBody(data, length, MessageType::kChallenge, "CHALLENGE");
  ChallengeMessage m;
  m.cookie = r.U64();
  r.ExpectEnd();
  if (m.cookie == 0) throw ProtocolError("CHALLENGE: cookie 0");
  return m;
}

uint64_t UnpredictableNonZero64() {
  uint64_t value = 0;
  for (int tries = 0; value == 0 && tries < 100; ++tries) {
    ssize_t got = getrandom(&value, sizeof(value), 0);
    if (got < 0 && errno != EINTR) {
      throw RuntimeError(std::string("getrandom: ") + std::strerror(errno));
    }
    if (got != static_cast<ssize_t>(sizeof(value))) value = 0;
  }
  if (value == 0) throw RuntimeError("getrandom gave no random number");
  return value;
}

BusyMessage DecodeBusy(const uint8_t* data, size_t length) {
  return BusyMessage{DecodeReason(data, length, MessageType::kBusy, "BUSY")};
}

void CheckConnectFitsServer(const ConnectMessage& c, const ServerLayout& s) {
  if (c.num_gpus != s.num_gpus || c.nics_per_gpu != s.nics_per_gpu ||
      c.buffers_per_gpu != s.buffers_per_gpu) {
    throw ProtocolError("CONNECT: client has " + std::to_string(c.num_gpus) + " GPUs x " +
                        std::to_string(c.nics_per_gpu) + " NICs x " +
                        std::to_string(c.buffers_per_gpu) + " buffers, server has " +
                        std::to_string(s.num_gpus) + " x " + std::to_string(s.nics_per_gpu) +
                        " x " + std::to_string(s.buffers_per_gpu) +
                        " (start the client with the server's --gpus and --nics-per-gpu)");
  }
  // DecodeConnect guarantees these; a message built any other way must not
  // make ConnectMessage::region() index past its vectors.
  if (c.nic_addresses.size() != c.num_nics() ||
      c.regions.size() != c.num_nics() * c.buffers_per_gpu) {
    throw ProtocolError("CONNECT: " + std::to_string(c.nic_addresses.size()) + " addresses and " +
                        std::to_string(c.regions.size()) + " regions do not match the layout");
  }
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const RemoteRegion& region = c.regions[i];
    if (region.size == 0 || region.addr > std::numeric_limits<uint64_t>::max() - region.size) {
      throw ProtocolError("CONNECT: region " + std::to_string(i) + " is empty or wraps around");
    }
  }
}

void CheckRequestFits(const RandomFillRequest& q, const ConnectMessage& c, const ServerLayout& s) {
  if (q.page_size == 0 || q.page_size % 8 != 0) {
    throw ProtocolError("RANDOM_FILL: page size " + std::to_string(q.page_size) +
                        " is not a positive multiple of 8");
  }
  uint64_t pages = q.num_pages();
  if (pages > s.buffer_size / q.page_size) {
    throw ProtocolError("RANDOM_FILL: " + std::to_string(pages) + " pages of " +
                        std::to_string(q.page_size) + " bytes exceed the server's buffer of " +
                        std::to_string(s.buffer_size) + " bytes");
  }
  // Every page must land inside the smallest region it could target: slot
  // j covers [addr + j * page_size, addr + (j + 1) * page_size), which lies
  // inside [addr, addr + size) for j < size / page_size, and addr + size
  // does not wrap (CheckConnectFitsServer). Both products stay below size.
  uint64_t smallest = std::numeric_limits<uint64_t>::max();
  for (const auto& region : c.regions) smallest = std::min(smallest, region.size);
  uint64_t slots = smallest / q.page_size;
  for (uint64_t j = 0; j < pages; ++j) {
    uint32_t slot = q.page_indices[j];
    if (slot >= slots) {
      throw ProtocolError("RANDOM_FILL: page index " + std::to_string(slot) +
                          " outside the client's " + std::to_string(slots) + " slots");
    }
  }
  // Sorting a copy finds repeats in O(n log n) whatever the regions claim
  // (a bitmap of `slots` entries could be exabytes).
  std::vector<uint32_t> sorted = q.page_indices;
  std::sort(sorted.begin(), sorted.end());
  auto repeat = std::adjacent_find(sorted.begin(), sorted.end());
  if (repeat != sorted.end()) {
    throw ProtocolError("RANDOM_FILL: page index " + std::to_string(*repeat) + " repeats");
  }
}

std::string ToHex(const std::vector<uint8_t>& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

std::vector<uint8_t> FromHex(const std::string& hex) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw UsageError("server address is not hex: unexpected character '" + std::string(1, c) + "'");
  };
  if (hex.empty()) throw UsageError("server address is empty");
  if (hex.size() % 2 != 0) throw UsageError("server address has an odd number of hex digits");
  if (hex.size() / 2 > kMaxAddressLength) {
    throw UsageError("server address is longer than " + std::to_string(kMaxAddressLength) +
                     " bytes");
  }
  std::vector<uint8_t> bytes(hex.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return bytes;
}

}  // namespace tutorial
