// What the provider watchdog says of a stuck thread before the process ends
// (harness/shutdown.h, DescribeStuckThread): its name, its state and its
// stack, on one line, for a thread that spins and for one that sleeps. And
// how the crash guard (harness/main_guard.h) ends a process that faults
// inside libfabric: one line, exit code 3; a fault of ours stays a fault.
#include <gtest/gtest.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <sys/resource.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>

#include "common/errors.h"
#include "harness/main_guard.h"
#include "harness/shutdown.h"
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

// The exit codes GuardedMain promises (harness/main_guard.h).
TEST(GuardedMainTest, ExitCodesSayWhatFailed) {
  EXPECT_EQ(GuardedMain("guard_test", [] { return 0; }), 0);
  EXPECT_EQ(GuardedMain("guard_test", []() -> int { throw UsageError("bad flag"); }), 2);
  EXPECT_EQ(GuardedMain("guard_test", []() -> int { throw RuntimeError("failed"); }), 1);
  EXPECT_EQ(GuardedMain("guard_test", []() -> int { throw ProviderError("cannot rebuild"); }),
            kExitProviderFailed);
}

void NoCoreFile() {
  rlimit none{0, 0};
  setrlimit(RLIMIT_CORE, &none);
}

// fi_freeinfo walks the list it is given: a bad pointer faults inside
// libfabric.so, as shm's bugs A and B do (harness/recovery.h).
TEST(CrashGuardDeathTest, FaultInsideLibfabricEndsWithOneLineAndCode3) {
  EXPECT_EXIT(
      {
        NoCoreFile();
        InstallCrashGuard("crash_test");
        fi_freeinfo(reinterpret_cast<fi_info*>(uintptr_t{16}));
      },
      ::testing::ExitedWithCode(kExitProviderFailed),
      "^crash_test: error: SIGSEGV inside libfabric [0-9]+\\.[0-9]+ "
      "\\([^)]*libfabric[^)]*\\+0x[0-9a-f]+\\); "
      "known provider bugs .*; exiting \\(code 3: start it again, e.g. under "
      "tools/serve_forever.sh\\)\n$");
}

// Our own fault keeps its default action (a core dump where enabled): the
// guard neither hides it nor leaves the signal blocked.
TEST(CrashGuardDeathTest, FaultOutsideLibfabricStaysAFault) {
  EXPECT_EXIT(
      {
        NoCoreFile();
        InstallCrashGuard("crash_test");
        raise(SIGSEGV);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EXIT(
      {
        NoCoreFile();
        InstallCrashGuard("crash_test");
        raise(SIGBUS);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace tutorial
