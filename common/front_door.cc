#include "common/front_door.h"

#include <algorithm>
#include <cstdio>

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

FairMailbox::Refused FairMailbox::Push(Message message) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t& held = per_source_count_[message.source];
  if (held >= per_source_) return Refused::kSourceFull;
  if (messages_.size() >= capacity_) {
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

bool FairMailbox::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_.empty();
}

size_t FairMailbox::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_.size();
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

}  // namespace tutorial
