#include "common/front_door.h"

#include <rdma/fi_endpoint.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/errors.h"
#include "common/messages.h"

namespace tutorial {

std::vector<uint8_t> FairMailbox::SourceOf(const uint8_t* data, size_t length) {
  try {
    return DecodeHeader(data, length).session.address;
  } catch (const ProtocolError&) {
    return {};
  }
}

FairMailbox::Refused FairMailbox::Push(Message message, bool awaited) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t& held = per_source_count_[message.source];
  if (held >= per_source_) return Refused::kSourceFull;
  if (messages_.size() >= (awaited ? capacity_ : capacity_ - reserved_)) {
    if (held == 0) per_source_count_.erase(message.source);
    return Refused::kFull;
  }
  ++held;
  messages_.push_back(std::move(message));
  return Refused::kNo;
}

std::optional<FairMailbox::Message> FairMailbox::Take() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (messages_.empty()) return std::nullopt;
  Message message = std::move(messages_.front());
  messages_.pop_front();
  auto count = per_source_count_.find(message.source);
  if (count != per_source_count_.end() && --count->second == 0) per_source_count_.erase(count);
  return message;
}

bool FairMailbox::Holds(const std::vector<uint8_t>& source) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return per_source_count_.count(source) != 0;
}

bool FairMailbox::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_.empty();
}

size_t FairMailbox::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_.size();
}

bool WindowBudget::Take(std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (now - start_ >= window_) {
    start_ = now;
    used_ = 0;
  }
  if (used_ >= per_window_) return false;
  ++used_;
  return true;
}

bool ReplyLimiter::Allow(const std::vector<uint8_t>& address,
                         std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto last = last_.find(address);
  if (last != last_.end()) {
    if (now - last->second < interval_) return false;
    last->second = now;
    return true;
  }
  // Forgetting everyone at once is fair to all and bounds the memory of a
  // flood that names a new address every time.
  if (last_.size() >= remembered_) last_.clear();
  last_.emplace(address, now);
  return true;
}

bool RecentlyChecked::Passed(const std::vector<uint8_t>& address,
                             std::chrono::steady_clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto pass = passed_.find(address);
  return pass != passed_.end() && now - pass->second < valid_;
}

void RecentlyChecked::NotePass(const std::vector<uint8_t>& address,
                               std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (passed_.size() >= remembered_ && passed_.count(address) == 0) passed_.clear();
  passed_[address] = now;
}

bool ReplyLimiter::AllowAll(const std::vector<std::vector<uint8_t>>& addresses,
                            std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& address : addresses) {
    auto last = last_.find(address);
    if (last != last_.end() && now - last->second < interval_) return false;
  }
  if (last_.size() + addresses.size() > remembered_) last_.clear();  // as in Allow
  for (const auto& address : addresses) last_[address] = now;
  return true;
}

RateLimitedLog::RateLimitedLog(size_t lines_per_interval, std::chrono::seconds interval,
                               std::string summary_prefix)
    : lines_per_interval_(lines_per_interval),
      interval_(interval),
      summary_prefix_(std::move(summary_prefix)) {}

void RateLimitedLog::Write(const std::string& line) {
  if (sink != nullptr) {
    sink->push_back(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void RateLimitedLog::Line(const std::string& line, Clock::time_point now) {
  Flush(now);
  std::lock_guard<std::mutex> lock(mutex_);
  if (written_ == 0 && left_out_ == 0) window_start_ = now;
  if (written_ < lines_per_interval_) {
    ++written_;
    Write(line);
  } else {
    ++left_out_;
    last_left_out_ = line;
  }
}

void RateLimitedLog::Flush(Clock::time_point now, bool force) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (written_ == 0 && left_out_ == 0) return;
  if (!force && now - window_start_ < interval_) return;
  if (left_out_ > 0) {
    long seconds = static_cast<long>(
        std::chrono::duration_cast<std::chrono::seconds>(now - window_start_).count());
    Write(summary_prefix_ + " " + std::to_string(left_out_) + " more in the last " +
          std::to_string(seconds < 1 ? 1 : seconds) +
          " s (lines left out; the last: " + last_left_out_ + ")");
  }
  written_ = 0;
  left_out_ = 0;
  window_start_ = now;
}

std::string WhyReplyMayNotWait(const std::vector<WaitingReply>& waiting, bool to_sender,
                               const Session& of, size_t sender_limit) {
  size_t senders_waiting = 0;
  for (const WaitingReply& reply : waiting) {
    if (reply.to_sender) ++senders_waiting;
    if (!to_sender && !reply.to_sender && reply.of.address == of.address &&
        reply.of.nonce != of.nonce) {
      return "; no reply sent: the provider cannot reach its address yet, and a reply to "
             "another session of its sender waits";
    }
  }
  if (to_sender && senders_waiting >= sender_limit) {
    return "; no reply sent: the provider cannot reach its address yet, and " +
           std::to_string(sender_limit) + " replies already wait for theirs";
  }
  return "";
}

std::vector<std::vector<uint8_t>> DeclaredAddresses(const Session& session,
                                                    const ConnectMessage& connect) {
  std::vector<std::vector<uint8_t>> addresses{session.address};
  for (const auto& address : connect.nic_addresses) {
    if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
      addresses.push_back(address);
    }
  }
  return addresses;
}

PendingConnects::Kept PendingConnects::Keep(const Session& session, ConnectMessage connect,
                                            TimePoint now) {
  Kept kept;
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<std::vector<uint8_t>> addresses = DeclaredAddresses(session, connect);
  // A session that sends its CONNECT again (the same addresses) keeps its
  // cookies.
  std::vector<Challenge> challenges;
  for (auto it = entries_.begin(); it != entries_.end();) {
    bool same_address = it->session.address == session.address;
    bool expired = now - it->arrived > max_age_;
    if (same_address || expired) {
      if (!same_address) ++kept.expired;
      if (it->session == session && !expired &&
          DeclaredAddresses(it->session, it->connect) == addresses) {
        challenges = std::move(it->challenges);
      }
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  if (entries_.size() >= capacity_) return kept;
  uint64_t sum = 0;
  if (challenges.empty()) {
    do {  // 0 is no cookie: a RANDOM_FILL never carries it
      challenges.clear();
      sum = 0;
      for (const auto& address : addresses) {
        challenges.push_back(Challenge{address, UnpredictableNonZero64()});
        sum ^= challenges.back().cookie;
      }
    } while (sum == 0);
  } else {
    for (const Challenge& challenge : challenges) sum ^= challenge.cookie;
  }
  kept.cookie = sum;
  kept.challenges = challenges;
  entries_.push_back(Entry{session, sum, std::move(challenges), std::move(connect), now});
  return kept;
}

PendingConnects::Pairing PendingConnects::Take(const Session& session, uint64_t cookie,
                                               ConnectMessage* connect) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->session != session) continue;
    bool match = it->cookie == cookie;
    if (match) *connect = std::move(it->connect);
    entries_.erase(it);
    return match ? Pairing::kPaired : Pairing::kWrongCookie;
  }
  return Pairing::kNoConnect;
}

bool PendingConnects::Awaits(const Session& session) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Entry& entry : entries_) {
    if (entry.session == session) return true;
  }
  return false;
}

bool PendingConnects::Forget(const Session& session) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->session == session) {
      entries_.erase(it);
      return true;
    }
  }
  return false;
}

size_t PendingConnects::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

namespace {

// libfabric 2.x's headers no longer name the bit: never asked for there.
#if defined(FI_BUFFERED_RECV)
constexpr uint64_t kBufferedRecv = FI_BUFFERED_RECV;
#else
constexpr uint64_t kBufferedRecv = 0;
#endif

// `nic0`, or where buffered receives are wanted and granted, the same
// domain asked for again with them.
FiInfoPtr FrontDoorInfo(const fi_info& nic0) {
  FiInfoPtr same(fi_dupinfo(&nic0));
  const char* provider = nic0.fabric_attr->prov_name;
  if (kBufferedRecv == 0 || provider == nullptr ||
      !FrontDoorNetwork::WantsBufferedReceives(fi_version(), provider)) {
    return same;
  }
  FiInfoPtr hints(fi_dupinfo(&nic0));
  hints->mode |= kBufferedRecv;
  fi_info* found = nullptr;
  int ret = fi_getinfo(RequestedApiVersion(), nullptr, nullptr, 0, hints.get(), &found);
  FiInfoPtr list(found);
  if (ret != 0) return same;
  const char* domain = nic0.domain_attr->name;
  for (const fi_info* info = found; info != nullptr; info = info->next) {
    const char* name = info->domain_attr->name;
    if ((info->mode & kBufferedRecv) != 0 && domain != nullptr && name != nullptr &&
        std::strcmp(domain, name) == 0) {
      return FiInfoPtr(fi_dupinfo(info));
    }
  }
  return same;
}

}  // namespace

bool FrontDoorNetwork::WantsBufferedReceives(uint32_t library_version,
                                             const std::string& provider) {
  return FI_MAJOR(library_version) == 1 && provider == "tcp;ofi_rxm";
}

FrontDoorNetwork::FrontDoorNetwork(const fi_info& nic0)
    : Network(*FrontDoorInfo(nic0)),
      buffered_(kBufferedRecv != 0 && (info().mode & kBufferedRecv) != 0 &&
                WantsBufferedReceives(fi_version(), info().fabric_attr->prov_name)) {
  if (!buffered_) return;
  size_t length = sizeof(size_t);
  if (fi_getopt(&endpoint()->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &buffered_limit_,
                &length) != 0) {
    buffered_limit_ = 0;
  }
}

bool FrontDoorNetwork::TrySendNow(fi_addr_t peer, const void* buf, size_t length, void* desc,
                                  OpCallback callback) {
  // Alone in the queue, so that it is offered to the provider now, whatever
  // waits there; the others keep their places.
  std::deque<RdmaOp*> others;
  others.swap(pending_ops);
  PostSend(peer, buf, length, desc, std::move(callback));
  bool taken = pending_ops.empty();
  if (!taken) FreeOp(pending_ops.front());
  pending_ops.swap(others);
  return taken;
}

size_t FrontDoorNetwork::PollCompletion() {
  if (!buffered_) return Network::PollCompletion();
  // Network::PollCompletion's steps, where a receive's context is the
  // provider's (struct fi_recv_context), never an RdmaOp.
  size_t handled = failed_ops.size();
  if (handled > 0) {
    std::deque<RdmaOp*> failed;
    failed.swap(failed_ops);
    for (RdmaOp* op : failed) Finish(op);
  }
  fi_cq_data_entry entries[kCqReadCount];
  for (;;) {
    if (hooks != nullptr) hooks->EnterProvider(ProviderCall::kCqRead);
    ssize_t n = fi_cq_read(completion_queue(), entries, kCqReadCount);
    if (hooks != nullptr) hooks->LeaveProvider(ProviderCall::kCqRead, n, 0);
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      TakeError();
      ++handled;
      continue;
    }
    CheckFabric(n, "fi_cq_read");
    for (ssize_t i = 0; i < n; ++i) {
      const fi_cq_data_entry& entry = entries[i];
      if (IsRemoteWrite(entry)) continue;  // nobody writes to the front door
      try {
        if ((entry.flags & FI_RECV) != 0) {
          TakeBuffered(entry);
        } else {
          Finish(static_cast<RdmaOp*>(entry.op_context));
        }
      } catch (...) {
        // The rest of this read is the provider's too: its buffers go back
        // untaken before the error leaves.
        for (ssize_t rest = i + 1; rest < n; ++rest) {
          if ((entries[rest].flags & FI_RECV) != 0 && !IsRemoteWrite(entries[rest])) {
            GiveBack(entries[rest].op_context);
          }
        }
        throw;
      }
    }
    handled += static_cast<size_t>(n);
  }
  ProgressPendingOps();
  return handled;
}

void FrontDoorNetwork::TakeBuffered(const fi_cq_data_entry& entry) {
  // The provider's buffer goes back to it however this call ends: until it
  // does, rxm reads no more from the sender's connection.
  struct GivenBack {
    FrontDoorNetwork& net;
    void* context;
    ~GivenBack() { net.GiveBack(context); }
  } given_back{*this, entry.op_context};
  // A peer decides what it sends: the length is checked before anything
  // is read. FI_MORE: the buffer holds only the start of a longer message
  // (over tcp on 1.17 none of it: FI_OPT_BUFFERED_MIN is 0), which rxm
  // would hand over only if claimed (FI_CLAIM). It is not: claiming a
  // message that came in segments (16 to 128 KB), 1.x's rxm reads the
  // first segment's buffer after it posted it again (v1.17.0 rxm_cq.c,
  // rxm_handle_seg_data), and a CONNECT, or a RANDOM_FILL of up to about
  // 4000 pages, fits in one buffer.
  const auto* data = static_cast<const uint8_t*>(entry.buf);
  if ((entry.flags & FI_MORE) != 0 || entry.len > kMaxMessageSize || data == nullptr) {
    if (on_dropped_) {
      on_dropped_("a message of " + std::to_string(entry.len) + " bytes, longer than the " +
                  std::to_string(buffered_limit_) +
                  " the front door's provider buffers take (not taken)");
    }
    return;
  }
  if (on_message_) on_message_(data, entry.len);
}

void FrontDoorNetwork::GiveBack(void* context) noexcept {
  fi_msg msg{};
  msg.context = context;
  if (hooks != nullptr) hooks->EnterProvider(ProviderCall::kRecv);
  ssize_t ret = fi_recvmsg(endpoint(), &msg, FI_DISCARD);
  if (hooks != nullptr) hooks->LeaveProvider(ProviderCall::kRecv, ret, FI_DISCARD);
  if (ret == 0 || !on_dropped_) return;
  try {
    on_dropped_(std::string("a provider buffer was not taken back: ") +
                fi_strerror(static_cast<int>(ret < 0 ? -ret : ret)));
  } catch (...) {
    // Nothing more to say: this runs on the way out of an error too.
  }
}

void FrontDoorNetwork::TakeError() {
  fi_cq_err_entry err{};
  if (hooks != nullptr) hooks->EnterProvider(ProviderCall::kCqReadErr);
  ssize_t ret = fi_cq_readerr(completion_queue(), &err, 0);
  if (hooks != nullptr) hooks->LeaveProvider(ProviderCall::kCqReadErr, ret, 0);
  if (ret == -FI_EAGAIN) return;
  CheckFabric(ret, "fi_cq_readerr");
  int error = err.err > 0 ? err.err : err.err < 0 ? -err.err : FI_EOTHER;
  std::string message = fi_strerror(error);
  if ((err.flags & FI_RECV) != 0 || err.op_context == nullptr ||
      (err.flags & FI_REMOTE_WRITE) != 0) {
    // A receive that failed inside the provider: no buffer of ours, none
    // to give back (rxm keeps its own).
    if ((err.flags & FI_RECV) != 0 && on_dropped_) {
      on_dropped_("a receive failed in the provider: " + message);
    } else if (hooks != nullptr) {
      hooks->ErrorWithoutOp(*this, message);
    }
    return;
  }
  auto* op = static_cast<RdmaOp*>(err.op_context);
  op->error = error;
  op->error_message = std::move(message);
  Finish(op);
}

}  // namespace tutorial
