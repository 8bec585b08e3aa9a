// OwedFills (harness/recovery.h): the RANDOM_FILLs still owed by clients told
// BUSY, kept per session. A client that died after its CONNECT owes one
// until its own deadline; another client's RANDOM_FILL never pays it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "harness/recovery.h"

namespace tutorial {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

Session Client(uint64_t nonce, uint8_t address = 1) {
  return Session{nonce, std::vector<uint8_t>(16, address)};
}

TEST(OwedFills, NothingOwedAtFirst) {
  OwedFills owed;
  EXPECT_FALSE(owed.Take(Client(1), Clock::now()));
}

TEST(OwedFills, OnlyTheSessionsOwnFillPaysItsDebt) {
  OwedFills owed;
  owed.Add(Client(7));
  EXPECT_FALSE(owed.Take(Client(8), Clock::now())) << "another nonce paid it";
  EXPECT_FALSE(owed.Take(Client(7, 2), Clock::now())) << "another address paid it";
  EXPECT_TRUE(owed.Take(Client(7), Clock::now()));
  EXPECT_FALSE(owed.Take(Client(7), Clock::now())) << "paid twice";
}

TEST(OwedFills, ADebtExpiresOnItsOwnDeadline) {
  OwedFills owed;
  const Clock::time_point told_busy = Clock::now();
  owed.Add(Client(1));  // a client that will never send its RANDOM_FILL
  std::this_thread::sleep_for(milliseconds(50));
  owed.Add(Client(2));  // a live client's retry, told BUSY
  const auto seconds = std::chrono::duration<double>(OwedFills::kOwedSeconds);
  const auto deadline = told_busy + std::chrono::duration_cast<Clock::duration>(seconds);
  EXPECT_FALSE(owed.Take(Client(1), deadline + milliseconds(30)));
  EXPECT_TRUE(owed.Take(Client(2), deadline + milliseconds(30)));
}

TEST(OwedFills, AFloodKeepsAtMostTheNewestSessions) {
  OwedFills owed;
  for (uint64_t i = 1; i <= OwedFills::kMaxOwed + 100; ++i) owed.Add(Client(i));
  EXPECT_EQ(owed.size(), OwedFills::kMaxOwed);
  EXPECT_FALSE(owed.Take(Client(1), Clock::now()));
  EXPECT_TRUE(owed.Take(Client(OwedFills::kMaxOwed + 100), Clock::now()));
}

}  // namespace
}  // namespace tutorial
