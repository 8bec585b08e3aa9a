// simnic's FI_THREAD_SAFE lock (nic.h, BoundedLock) never waits without
// bound: a caller that cannot take it gives up after a bounded number of
// tries even when the time it may spin is long, and answers -FI_EAGAIN
// (provider.cc, CallLock), as EFA does for a full queue. Built from the
// header and the model directly (not through libfabric): no libfabric call
// can hold the lock from outside for long.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "simnic/nic.h"

namespace simnic {
namespace {

using Clock = std::chrono::steady_clock;

TEST(BoundedLockTest, FreeLockIsTakenAtOnce) {
  BoundedLock lock;
  EXPECT_TRUE(lock.TryLockFor(0));
  lock.Unlock();
  EXPECT_TRUE(lock.TryLockFor(BoundedLock::kLockSpinNs));
}

// The clock alone would let a caller whose spin time is long (or whose
// clock readings are slow: a sanitizer, a crowded core) wait that long;
// the count of tries ends it first.
TEST(BoundedLockTest, HeldLockGivesUpAfterBoundedTriesWhateverTheSpinTime) {
  BoundedLock lock;
  ASSERT_TRUE(lock.TryLockFor(0));
  auto start = Clock::now();
  EXPECT_FALSE(lock.TryLockFor(30ull * 1000000000ull));  // 30 s by the clock
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 5.0) << "the tries, not the clock, must end the wait";
}

TEST(BoundedLockTest, HeldLockGivesUpByTheClock) {
  BoundedLock lock;
  ASSERT_TRUE(lock.TryLockFor(0));
  auto start = Clock::now();
  EXPECT_FALSE(lock.TryLockFor(BoundedLock::kLockSpinNs));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
}

TEST(BoundedLockTest, LockReleasedDuringTheSpinIsTaken) {
  BoundedLock lock;
  ASSERT_TRUE(lock.TryLockFor(0));
  std::atomic<bool> spinning{false};
  std::thread holder([&] {
    while (!spinning.load()) std::this_thread::yield();
    lock.Unlock();
  });
  spinning.store(true);
  // Retried as a caller retries after -FI_EAGAIN; bounded by count.
  bool taken = false;
  for (int i = 0; i < 100000 && !taken; ++i) taken = lock.TryLockFor(BoundedLock::kLockSpinNs);
  holder.join();
  EXPECT_TRUE(taken);
}

}  // namespace
}  // namespace simnic
