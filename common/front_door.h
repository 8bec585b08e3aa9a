// The server's front door under load: what keeps a flood of messages from
// sinking it. None of it is a chapter's idea; common/server.cc uses it.
//
// - FairMailbox: messages wait here between the front door's completion
//   queue and the code that handles them. A source (the address a message
//   names as its sender) may hold only a few places, so a flooding source
//   cannot push out the others; a message that finds no place is refused,
//   and the caller answers it (BUSY) or drops it, never leaves it queued.
// - ReplyLimiter: at most one unasked-for reply (BUSY to a message turned
//   away) per address and interval, so a flood is not answered in kind.
// - RateLimitedLog: a few lines per interval in full, then one line with
//   the count of those left out.
// - PendingConnects: CONNECTs waiting for their RANDOM_FILL, each with one
//   cookie for every address it declares (its session's and its NICs'),
//   sent to that address alone; a RANDOM_FILL is paired only with the
//   CONNECT of its session, and only when it carries all of them (XORed).
// - FrontDoorNetwork: the front door's endpoint, whose messages arrive in
//   the provider's own buffers where that bounds the provider's memory.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/messages.h"
#include "common/network.h"

namespace tutorial {

class FairMailbox {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Message {
    std::vector<uint8_t> bytes;
    TimePoint arrived;
    std::vector<uint8_t> source;  // empty: the message names no sender
  };
  enum class Refused { kNo, kSourceFull, kFull };

  // `reserved` of the `capacity` places hold only awaited messages (a
  // RANDOM_FILL whose CONNECT was answered): a sender can name a new
  // address in every message and so escape the per-source limit, but it
  // cannot take the places of clients already let in.
  FairMailbox(size_t capacity, size_t per_source, size_t reserved = 0)
      : capacity_(capacity), per_source_(per_source), reserved_(reserved) {}

  // Keeps the message, or says why not.
  Refused Push(Message message, bool awaited = false);
  std::optional<Message> Take();
  bool empty() const;
  size_t size() const;
  // True when a message of `source` is waiting.
  bool Holds(const std::vector<uint8_t>& source) const;

  // The sender a message names (its session's address), read without
  // trusting anything else in it; empty when it names none.
  static std::vector<uint8_t> SourceOf(const uint8_t* data, size_t length);

 private:
  const size_t capacity_;
  const size_t per_source_;
  const size_t reserved_;
  mutable std::mutex mutex_;
  std::deque<Message> messages_;
  std::map<std::vector<uint8_t>, size_t> per_source_count_;
};

class ReplyLimiter {
 public:
  explicit ReplyLimiter(std::chrono::milliseconds interval, size_t remembered = 4096)
      : interval_(interval), remembered_(remembered) {}
  // True when no reply went to `address` within the interval before `now`.
  bool Allow(const std::vector<uint8_t>& address, std::chrono::steady_clock::time_point now);
  // True, and each counted as replied to, only when every one of
  // `addresses` is allowed; otherwise none is counted.
  bool AllowAll(const std::vector<std::vector<uint8_t>>& addresses,
                std::chrono::steady_clock::time_point now);

 private:
  const std::chrono::milliseconds interval_;
  const size_t remembered_;
  std::mutex mutex_;
  std::map<std::vector<uint8_t>, std::chrono::steady_clock::time_point> last_;
};

// At most `per_window` uses in each window of time, for all callers
// together: what a flood of new names may cost, whatever names it uses.
class WindowBudget {
 public:
  WindowBudget(size_t per_window, std::chrono::milliseconds window)
      : per_window_(per_window), window_(window) {}
  // True, and counted, while this window has a use left.
  bool Take(std::chrono::steady_clock::time_point now);

 private:
  const size_t per_window_;
  const std::chrono::milliseconds window_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_{};
  size_t used_ = 0;
};

// Addresses that passed a check lately, each for `valid` after its check:
// a flood from one address is checked once per `valid`, not once per
// message. Only passes are remembered, at most `remembered` of them.
class RecentlyChecked {
 public:
  RecentlyChecked(std::chrono::milliseconds valid, size_t remembered)
      : valid_(valid), remembered_(remembered) {}
  bool Passed(const std::vector<uint8_t>& address, std::chrono::steady_clock::time_point now) const;
  void NotePass(const std::vector<uint8_t>& address, std::chrono::steady_clock::time_point now);

 private:
  const std::chrono::milliseconds valid_;
  const size_t remembered_;
  mutable std::mutex mutex_;
  std::map<std::vector<uint8_t>, std::chrono::steady_clock::time_point> passed_;
};

class RateLimitedLog {
 public:
  using Clock = std::chrono::steady_clock;
  // Writes lines to stderr (or to `sink`, for tests).
  RateLimitedLog(size_t lines_per_interval, std::chrono::seconds interval,
                 std::string summary_prefix);
  void Line(const std::string& line, Clock::time_point now = Clock::now());
  // Writes the summary of lines left out, once their interval is over
  // (call it now and then, and before the program ends with `force`).
  void Flush(Clock::time_point now = Clock::now(), bool force = false);
  std::vector<std::string>* sink = nullptr;

 private:
  void Write(const std::string& line);
  const size_t lines_per_interval_;
  const std::chrono::seconds interval_;
  const std::string summary_prefix_;
  std::mutex mutex_;
  Clock::time_point window_start_{};
  size_t written_ = 0;
  size_t left_out_ = 0;
  std::string last_left_out_;
};

// A reply the provider could not take at once, waiting for it to reach its
// address (over tcp it connects first, for ever where nobody listens).
struct WaitingReply {
  bool to_sender = true;  // to the address a message declares it came from
  Session of;             // a CHALLENGE to another NIC: its CONNECT's session
};

// Why one more reply may not wait, or "" when it may: to a sender, while
// fewer than `sender_limit` such replies wait (senders that forge their
// address are never reached, and must not hold every reply slot); to
// another NIC of a CONNECT whose sender was reached at once, while no reply
// of another session of that sender waits (one sender, one CONNECT's worth).
std::string WhyReplyMayNotWait(const std::vector<WaitingReply>& waiting, bool to_sender,
                               const Session& of, size_t sender_limit);

// The addresses a CONNECT of `session` declares, each once, the session's
// first: where the server sends its CHALLENGEs.
std::vector<std::vector<uint8_t>> DeclaredAddresses(const Session& session,
                                                    const ConnectMessage& connect);

// CONNECTs kept until the RANDOM_FILL of their session: one per address (a
// newer session of the same address replaces the older one, and its
// cookies), at most `capacity` in all, each for `max_age` at most. Each is
// kept with a cookie for every address it declares (DeclaredAddresses), a
// random number (UnpredictableNonZero64) that the server sends only to that
// address (CHALLENGE). A RANDOM_FILL pairs only when its cookie is the XOR
// of them all: it comes from a peer that receives at every one of those
// addresses (or from peers that pooled what each received), so the server
// never writes to an endpoint that did not ask for it.
class PendingConnects {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  PendingConnects(size_t capacity, std::chrono::duration<double> max_age)
      : capacity_(capacity), max_age_(max_age) {}

  // One CHALLENGE to send: its cookie, to this address only.
  struct Challenge {
    std::vector<uint8_t> address;
    uint64_t cookie = 0;
  };
  struct Kept {
    uint64_t cookie = 0;                // what its RANDOM_FILL must carry; 0: no room, nothing kept
    std::vector<Challenge> challenges;  // one per DeclaredAddresses, in that order
    size_t expired = 0;                 // CONNECTs of other addresses dropped for their age
  };
  // Keeps `connect` of `session`, arrived at `now`, with new cookies, or
  // with the cookies it already has when the same session sends its CONNECT
  // again (a client whose CHALLENGE was slow or lost).
  Kept Keep(const Session& session, ConnectMessage connect, TimePoint now);

  enum class Pairing { kPaired, kNoConnect, kWrongCookie };
  // A RANDOM_FILL of `session` carrying `cookie`: the session's CONNECT
  // leaves, whatever the cookie (a RANDOM_FILL, good or bad, ends it), and
  // is handed to `*connect` only when the cookie is the XOR of those it was
  // kept with (kPaired).
  Pairing Take(const Session& session, uint64_t cookie, ConnectMessage* connect);
  // True when a CONNECT of `session` is kept (its RANDOM_FILL is awaited).
  bool Awaits(const Session& session) const;
  // Forgets the CONNECT of `session`; true when one was kept.
  bool Forget(const Session& session);
  size_t size() const;

 private:
  struct Entry {
    Session session;
    uint64_t cookie;  // the XOR of the challenges' cookies
    std::vector<Challenge> challenges;
    ConnectMessage connect;
    TimePoint arrived;
  };
  const size_t capacity_;
  const std::chrono::duration<double> max_age_;
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;  // oldest first
};

// The server's front door: a Network whose receives, over libfabric 1.x's
// tcp;ofi_rxm, are the provider's own buffers (FI_BUFFERED_RECV, fi_msg(3)
// "Buffered Receives"). With receives the application posts, ofi_rxm keeps
// every message that none matches yet and posts a new buffer of about
// 16 KB in its place, so a flood grows the server by gigabytes. With its
// own buffers rxm posts one again only when the application gives it back:
// while the server is behind, tcp stops reading the socket, and TCP's flow
// control slows the sender instead. Each message is handed over, copied,
// and its buffer given back at once, also when handing it over fails.
//
// libfabric 2.0 took FI_BUFFERED_RECV out of its API (2.x's rxm never
// takes a given-back buffer again), and 1.17's shm and efa do not offer it:
// there, and wherever the provider does not grant the mode, the front door
// posts its receives as any Network does.
class FrontDoorNetwork : public Network {
 public:
  enum class ReceiveMode { kPosted, kBuffered };
  // A whole message, valid only during the call.
  using MessageCallback = std::function<void(const uint8_t* data, size_t length)>;
  // A message that could not be taken, and why (one line).
  using DropCallback = std::function<void(const std::string& why)>;

  // On `nic0`'s domain, asking for buffered receives where they are safe.
  explicit FrontDoorNetwork(const fi_info& nic0);

  ReceiveMode receive_mode() const {
    return buffered_ ? ReceiveMode::kBuffered : ReceiveMode::kPosted;
  }
  // Where messages go in the buffered mode (in the posted mode, the
  // callbacks of the receives the owner posts).
  void OnMessage(MessageCallback message, DropCallback dropped) {
    on_message_ = std::move(message);
    on_dropped_ = std::move(dropped);
  }
  // The buffered mode's longest message that arrives whole (rxm's eager
  // size, FI_OPT_BUFFERED_LIMIT); 0 in the posted mode.
  size_t buffered_limit() const { return buffered_limit_; }

  // Network::PollCompletion, and in the buffered mode also every message
  // that arrived, handed to OnMessage's callbacks. Hides Network's: the
  // front door is always polled as a FrontDoorNetwork.
  size_t PollCompletion();

  // A send that the provider takes now or never: true when it took it (or
  // refused it for good: then the callback hears the error at the next
  // poll); false, with nothing posted and nobody to call back, when it would
  // hold it back. Over tcp it holds a send back while it connects to the
  // address, for ever where nobody listens.
  bool TrySendNow(fi_addr_t peer, const void* buf, size_t length, void* desc, OpCallback callback);

  // Whether a 1.x tcp;ofi_rxm front door asks for buffered receives: a
  // libfabric of major version 1 (`library_version`, fi_version()), and a
  // provider named "tcp;ofi_rxm".
  static bool WantsBufferedReceives(uint32_t library_version, const std::string& provider);

 private:
  void TakeBuffered(const fi_cq_data_entry& entry);
  // Gives a buffered message's buffer back to the provider (FI_DISCARD).
  void GiveBack(void* context) noexcept;
  void TakeError();

  const bool buffered_;
  size_t buffered_limit_ = 0;
  MessageCallback on_message_;
  DropCallback on_dropped_;
};

}  // namespace tutorial
