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
  // Sessions of ever new addresses (one session of each).
  auto stranger = [](uint64_t i) {
    std::vector<uint8_t> address(16, 0);
    for (int b = 0; b < 8; ++b) address[b] = static_cast<uint8_t>(i >> (8 * b));
    return Session{i, address};
  };
  for (uint64_t i = 1; i <= OwedFills::kMaxOwed + 100; ++i) owed.Add(stranger(i));
  EXPECT_EQ(owed.size(), OwedFills::kMaxOwed);
  EXPECT_FALSE(owed.Take(stranger(1), Clock::now()));
  EXPECT_TRUE(owed.Take(stranger(OwedFills::kMaxOwed + 100), Clock::now()));
}

// The sequence seen over tcp under a flood of malformed addresses: a good
// client's CONNECT is turned away (BUSY, its RANDOM_FILL owed), then the
// attacker's CONNECTs, each of a new session of its one address, are turned
// away by the thousand before the good client's RANDOM_FILL is read. That
// RANDOM_FILL must still find its debt (else it meets "no CONNECT of its
// session"), and the flood keeps only a few debts of its own.
TEST(OwedFills, ASourceFloodingConnectsCannotPushOutAnotherClientsDebt) {
  OwedFills owed;
  const Session good = Client(42, /*address=*/7);
  owed.Add(good);
  for (uint64_t nonce = 1; nonce <= 10 * OwedFills::kMaxOwed; ++nonce) {
    owed.Add(Client(nonce, /*address=*/9));
  }
  EXPECT_LE(owed.size(), 1 + OwedFills::kMaxOwedPerAddress);
  EXPECT_TRUE(owed.Take(good, Clock::now())) << "the flood pushed out the good client's debt";
  // The flood's newest debts are kept, its oldest are gone.
  EXPECT_TRUE(owed.Take(Client(10 * OwedFills::kMaxOwed, 9), Clock::now()));
  EXPECT_FALSE(owed.Take(Client(1, 9), Clock::now()));
}

// The client told BUSY asks again (the same session): a second BUSY owes
// one RANDOM_FILL, not two.
TEST(OwedFills, ASessionToldBusyTwiceOwesOneFill) {
  OwedFills owed;
  owed.Add(Client(5));
  owed.Add(Client(5));
  EXPECT_EQ(owed.size(), 1u);
  EXPECT_TRUE(owed.Take(Client(5), Clock::now()));
  EXPECT_FALSE(owed.Take(Client(5), Clock::now()));
}

}  // namespace
}  // namespace tutorial
