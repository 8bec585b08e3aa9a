// The watchdogs' view of a thread (harness/thread_stats.h).
#include "harness/thread_stats.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace tutorial {
namespace {

// ProgressClock is fed samples written by hand: a thread that gets no core
// cannot be produced on demand on a test machine, so the kernel's answers
// are faked here; SampleThread is checked on real threads below.
ThreadSample Sample(bool runnable, uint64_t run_ns, bool stopped = false) {
  ThreadSample s;
  s.exists = true;
  s.runnable = runnable;
  s.stopped = stopped;
  s.run_ns = run_ns;
  return s;
}

TEST(ProgressClock, CountsATickInWhichTheThreadRan) {
  ProgressClock clock;
  clock.Tick(0.2, Sample(true, 100));  // the first sample is the baseline
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.0);
  clock.Tick(0.2, Sample(true, 200));  // a thread spinning inside a call
  clock.Tick(0.2, Sample(true, 300));
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.4);
  EXPECT_EQ(clock.counted_ticks(), 2);
}

// The first look cannot tell whether the thread ran: under ThreadSanitizer
// on a loaded machine a watchdog that itself got no core for 10 s counted
// its first look at a preempted thread whole, and ended the program.
TEST(ProgressClock, FirstLookIsOnlyABaseline) {
  ProgressClock clock;
  clock.Tick(10.5, Sample(true, 100));  // on a runqueue since the call began?
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.0);
  clock.Tick(0.2, Sample(true, 100));  // it was: still no core
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.0);
}

// A thread that ran at the start of a long tick may have waited for a core
// for the rest of it: the tick counts for at most kLongestTickSeconds.
TEST(ProgressClock, ALongTickCountsAtMostTheLongestTick) {
  ProgressClock clock;
  clock.Tick(0.2, Sample(true, 100));
  clock.Tick(10.5, Sample(true, 101));
  EXPECT_DOUBLE_EQ(clock.seconds(), ProgressClock::kLongestTickSeconds);
  EXPECT_DOUBLE_EQ(clock.longest_tick(), 10.5);
  // A thread that really is stuck still gets there, one tick at a time.
  for (int i = 0; i < 50; ++i) clock.Tick(0.2, Sample(true, 102 + i));
  EXPECT_GT(clock.seconds(), 10.0);
}

TEST(ProgressClock, CountsATickInWhichTheThreadSlept) {
  ProgressClock clock;
  clock.Tick(0.2, Sample(false, 100));
  clock.Tick(0.2, Sample(false, 100));  // blocked in the kernel: no CPU, not starved
  clock.Tick(0.2, Sample(false, 100));
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.4);
}

TEST(ProgressClock, SkipsTicksInWhichARunnableThreadGotNoCore) {
  ProgressClock clock;
  clock.Tick(0.2, Sample(true, 100));
  for (int i = 0; i < 100; ++i) clock.Tick(0.2, Sample(true, 100));  // 20 s on a runqueue
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.0);
  clock.Tick(0.2, Sample(true, 101));  // it ran again
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.2);
}

TEST(ProgressClock, SkipsTicksOfAStoppedThread) {
  ProgressClock clock;
  clock.Tick(0.2, Sample(false, 100));
  clock.Tick(0.2, Sample(false, 100, /*stopped=*/true));  // a debugger holds it
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.0);
}

TEST(ProgressClock, CountsAThreadThatIsGone) {
  ProgressClock clock;
  clock.Tick(0.2, Sample(true, 100));
  clock.Tick(0.2, ThreadSample{});  // exited, or no /proc: wall time it is
  clock.Tick(0.2, ThreadSample{});
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.4);
  clock.Reset();
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.0);
}

TEST(SampleThread, ASpinningThreadIsRunnableAndRuns) {
  std::atomic<int> tid{0};
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    tid = ThisThreadId();
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  while (tid.load() == 0) std::this_thread::yield();
  ThreadSample first = SampleThread(tid);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  ThreadSample later = first;
  while (later.run_ns == first.run_ns && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    later = SampleThread(tid);
  }
  stop = true;
  spinner.join();
  EXPECT_TRUE(first.exists);
  EXPECT_GT(later.run_ns, first.run_ns);
}

TEST(SampleThread, AWaitingThreadIsNotRunnable) {
  std::mutex mutex;
  std::condition_variable wake;
  bool go = false;
  std::atomic<int> tid{0};
  std::thread waiter([&] {
    tid = ThisThreadId();
    std::unique_lock<std::mutex> lock(mutex);
    wake.wait(lock, [&] { return go; });
  });
  while (tid.load() == 0) std::this_thread::yield();
  // Until it sleeps in the kernel, it may still be on its way there.
  ThreadSample sample = SampleThread(tid);
  for (int i = 0; i < 1000 && sample.runnable; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    sample = SampleThread(tid);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    go = true;
  }
  wake.notify_all();
  waiter.join();
  EXPECT_TRUE(sample.exists);
  EXPECT_FALSE(sample.runnable);
  EXPECT_FALSE(sample.stopped);
}

TEST(SampleThread, NoSuchThread) {
  EXPECT_FALSE(SampleThread(0).exists);
  EXPECT_FALSE(SampleThread(-1).exists);
  EXPECT_EQ(ThisThreadId(), ThisThreadId());
  EXPECT_TRUE(SampleThread(ThisThreadId()).runnable);  // the caller runs
}

}  // namespace
}  // namespace tutorial
