// BusyAnswerer (harness/recovery.h): the thread that answers other clients
// BUSY during a transfer. It looks at the front door over and over while
// there is something to answer, and otherwise waits kBusyAnswererNap
// between looks: a thread that sleeps and wakes every millisecond beside the
// pinned writers was measured starving other processes for seconds on Linux
// 6.x (docs/simnic.md, "Why CI's chapter 12 still stalled"). Counted, not
// timed: a busy machine can only make the counts smaller.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "harness/recovery.h"

namespace tutorial {
namespace {

TEST(BusyAnswerer, IdleLooksAreAtLeastANapApart) {
  std::atomic<int> looks{0};
  auto start = std::chrono::steady_clock::now();
  {
    BusyAnswerer answerer([&looks] {
      looks.fetch_add(1);
      return size_t{0};  // nothing to answer
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // One look at once, then one per nap at most; the nap may not be under
  // 10 ms (sleeps of 5 ms already gave the probe's processes shares of 2 to
  // 1). A millisecond's wait made about 450 looks here.
  static_assert(kBusyAnswererNap >= std::chrono::milliseconds(10), "see docs/simnic.md");
  int most = 2 + static_cast<int>(seconds / 0.010);
  EXPECT_GE(looks.load(), 1);
  EXPECT_LE(looks.load(), most) << "in " << seconds << " s";
}

}  // namespace
}  // namespace tutorial
