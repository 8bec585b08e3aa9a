// libFuzzer target for everything the server does with bytes from the
// network before it trusts them: DecodeHeader (the session), the decoders
// (the server's CHALLENGE, which the client decodes, too), and
// CheckConnectFitsServer / CheckRequestFits. Built by maint/fuzz.sh with
// clang's -fsanitize=fuzzer,address,undefined.
//
// Input: u32 split, then a first message of (split % rest) bytes and a
// second message of the remaining bytes, so that one input can hold a
// CONNECT and the RANDOM_FILL that follows it.
//
// Besides "never crash, only ProtocolError", it checks what the server
// relies on: decoded messages encode back to the same bytes, and a request
// that passes the checks writes only inside the regions it targets.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "common/errors.h"
#include "common/messages.h"

namespace {

using tutorial::ConnectMessage;
using tutorial::ProtocolError;
using tutorial::RandomFillRequest;
using tutorial::ServerLayout;

[[noreturn]] void Broken(const char* what) {
  std::fprintf(stderr, "messages_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

struct Decoded {
  std::optional<ConnectMessage> connect;
  std::optional<RandomFillRequest> request;
};

// Runs every decoder on one message; each either succeeds or throws
// ProtocolError (anything else escapes and libFuzzer reports it).
Decoded DecodeAll(const uint8_t* data, size_t size) {
  Decoded d;
  std::vector<uint8_t> bytes(data, data + size);
  tutorial::Session session;
  try {
    tutorial::MessageHeader header = tutorial::DecodeHeader(data, size);
    session = header.session;
    if (header.body_offset > size) Broken("body starts past the message");
    if (header.session.address.size() > tutorial::kMaxAddressLength) Broken("long address");
  } catch (const ProtocolError&) {
  }
  try {
    d.connect = tutorial::DecodeConnect(data, size);
    if (tutorial::Encode(*d.connect, session) != bytes) Broken("CONNECT does not encode back");
  } catch (const ProtocolError&) {
  }
  try {
    d.request = tutorial::DecodeRandomFill(data, size);
    if (tutorial::Encode(*d.request, session) != bytes) Broken("RANDOM_FILL does not encode back");
  } catch (const ProtocolError&) {
  }
  try {
    tutorial::ChallengeMessage challenge = tutorial::DecodeChallenge(data, size);
    if (challenge.cookie == 0) Broken("CHALLENGE of cookie 0");
    if (tutorial::Encode(challenge, session) != bytes) Broken("CHALLENGE does not encode back");
  } catch (const ProtocolError&) {
  }
  try {
    tutorial::RejectMessage reject = tutorial::DecodeReject(data, size);
    if (reject.reason.size() > tutorial::kMaxRejectReason) Broken("REJECT reason too long");
  } catch (const ProtocolError&) {
  }
  return d;
}

// What CheckRequestFits promises: every page the server may write lands
// inside every region it may target, without wrapping around, the server's
// buffers hold the pages, and no slot is written twice.
void CheckWritesInside(const RandomFillRequest& q, const ConnectMessage& c, const ServerLayout& s) {
  const uint64_t ps = q.page_size;
  if (ps == 0 || q.num_pages() == 0) Broken("empty request passed");
  if (q.num_pages() > s.buffer_size / ps) Broken("pages exceed the server's buffer");
  std::set<uint32_t> seen;
  for (uint32_t index : q.page_indices) {
    if (!seen.insert(index).second) Broken("repeated index passed");
  }
  for (const auto& r : c.regions) {
    if (r.size == 0 || r.addr > std::numeric_limits<uint64_t>::max() - r.size) {
      Broken("empty or wrapping region passed");
    }
    for (uint32_t index : q.page_indices) {
      // offset + ps <= size, computed without overflow.
      if (r.size < ps || index > (r.size - ps) / ps) Broken("page outside its region");
    }
  }
}

void CheckPair(const ConnectMessage& c, const RandomFillRequest& q, uint64_t buffer_size) {
  // The server's own layout, and one that differs from the client's.
  ServerLayout same{c.num_gpus, c.nics_per_gpu, c.buffers_per_gpu, buffer_size};
  ServerLayout other{c.num_gpus + 1, c.nics_per_gpu, c.buffers_per_gpu, buffer_size};
  try {
    tutorial::CheckConnectFitsServer(c, other);
    Broken("CONNECT fits a server of another layout");
  } catch (const ProtocolError&) {
  }
  try {
    tutorial::CheckConnectFitsServer(c, same);
  } catch (const ProtocolError&) {
    return;
  }
  try {
    tutorial::CheckRequestFits(q, c, same);
  } catch (const ProtocolError&) {
    return;
  }
  CheckWritesInside(q, c, same);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) {
    DecodeAll(data, size);
    return 0;
  }
  uint32_t split = uint32_t{data[0]} | uint32_t{data[1]} << 8 | uint32_t{data[2]} << 16 |
                   uint32_t{data[3]} << 24;
  // The server's buffer size: 4 KiB to 1 TiB, from one byte.
  uint64_t buffer_size = uint64_t{4096} << (data[4] % 29);
  const uint8_t* rest = data + 5;
  size_t rest_size = size - 5;
  size_t first_size = split % (rest_size + 1);
  Decoded first = DecodeAll(rest, first_size);
  Decoded second = DecodeAll(rest + first_size, rest_size - first_size);
  if (first.connect && second.request) CheckPair(*first.connect, *second.request, buffer_size);
  return 0;
}
