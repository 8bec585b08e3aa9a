// OwedFills (harness/recovery.h): the RANDOM_FILLs still owed by clients told
// BUSY. A client that died after its CONNECT owes one forever; a live client
// that keeps retrying must not keep that debt alive (it did once: every
// retry reset one shared clock, and the live client heard BUSY until its
// --timeout, //tests:eq_errors_test).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "harness/recovery.h"

namespace tutorial {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(OwedFills, NothingOwedAtFirst) {
  OwedFills owed;
  EXPECT_FALSE(owed.Any(Clock::now()));
  EXPECT_FALSE(owed.Take(Clock::now()));
}

TEST(OwedFills, EachFillPaysOneDebt) {
  OwedFills owed;
  owed.Add(2);
  EXPECT_TRUE(owed.Take(Clock::now()));
  EXPECT_TRUE(owed.Any(Clock::now()));
  EXPECT_TRUE(owed.Take(Clock::now()));
  EXPECT_FALSE(owed.Any(Clock::now()));
}

TEST(OwedFills, DeadClientsDebtExpiresWhileALiveOneRetries) {
  OwedFills owed;
  const Clock::time_point dead_told_busy = Clock::now();
  owed.Add();  // a client that will never send its RANDOM_FILL
  std::this_thread::sleep_for(milliseconds(50));
  owed.Add();                            // a live client's retry, told BUSY
  EXPECT_TRUE(owed.Take(Clock::now()));  // its RANDOM_FILL
  const auto seconds = std::chrono::duration<double>(OwedFills::kOwedSeconds);
  const auto just_after =
      dead_told_busy + std::chrono::duration_cast<Clock::duration>(seconds) + milliseconds(30);
  EXPECT_FALSE(owed.Any(just_after)) << "the dead client's debt outlived its own deadline";
}

TEST(OwedFills, ADebtLivesUntilItsDeadline) {
  OwedFills owed;
  owed.Add();
  const auto seconds = std::chrono::duration<double>(OwedFills::kOwedSeconds);
  EXPECT_TRUE(owed.Any(Clock::now() + std::chrono::duration_cast<Clock::duration>(seconds / 2)));
}

}  // namespace
}  // namespace tutorial
