// What the provider watchdog says of a stuck thread before the process ends
// (common/shutdown.h, DescribeStuckThread): its name, its state and its
// stack, on one line, for a thread that spins and for one that sleeps.
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "common/shutdown.h"
#include "harness/thread_stats.h"

namespace tutorial {
namespace {

TEST(StuckThreadTest, SpinningThreadGivesStateAndStack) {
  std::atomic<int> tid{0};
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    pthread_setname_np(pthread_self(), "spinner");
    tid.store(ThisThreadId());
    // Bounded: the test stops it, or 30 s pass.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!stop.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < until) {
    }
  });
  while (tid.load() == 0) std::this_thread::yield();
  std::string where = DescribeStuckThread(tid.load());
  stop.store(true);
  spinner.join();
  EXPECT_NE(where.find("(spinner): state R"), std::string::npos) << where;
  EXPECT_NE(where.find("; stack: "), std::string::npos) << where;
  EXPECT_NE(where.find(" < "), std::string::npos) << where;
  EXPECT_EQ(where.find('\n'), std::string::npos) << where;
  std::printf("%s\n", where.c_str());
}

TEST(StuckThreadTest, SleepingThreadGivesStateAndStack) {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::atomic<int> tid{0};
  std::thread sleeper([&] {
    pthread_setname_np(pthread_self(), "sleeper");
    std::unique_lock<std::mutex> lock(mutex);
    tid.store(ThisThreadId());
    wake.wait_for(lock, std::chrono::seconds(30), [&] { return stop; });
  });
  while (tid.load() == 0) std::this_thread::yield();
  // Until it sleeps in the condition variable (bounded).
  std::string where;
  for (int i = 0; i < 200; ++i) {
    where = DescribeStuckThread(tid.load());
    if (where.find("state S") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  wake.notify_all();
  sleeper.join();
  EXPECT_NE(where.find("(sleeper): state S"), std::string::npos) << where;
  EXPECT_NE(where.find("system call "), std::string::npos) << where;
  EXPECT_NE(where.find("; stack: "), std::string::npos) << where;
}

TEST(StuckThreadTest, GoneThreadSaysSo) {
  int tid = 0;
  std::thread([&] { tid = ThisThreadId(); }).join();
  EXPECT_NE(DescribeStuckThread(tid).find("is gone"), std::string::npos);
  EXPECT_EQ(DescribeStuckThread(0), "no thread known");
}

}  // namespace
}  // namespace tutorial
