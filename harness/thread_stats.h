// What the operating system did to a thread: CPU time, involuntary context
// switches, migrations between cores. Chapter 12 (pinning) moves the last
// two; the counters on every result line show it.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace tutorial {

struct ThreadUsage {
  uint64_t wall_ticks = 0;  // ReadTicks() units
  uint64_t cpu_ns = 0;
  uint64_t involuntary_switches = 0;
  int64_t migrations = -1;  // -1: the kernel does not say (no /proc/thread-self/sched)

  ThreadUsage operator-(const ThreadUsage& earlier) const;
};

// The calling thread's usage so far (a few microseconds: not for hot loops).
ThreadUsage SampleThisThread();

// Names the calling thread (`writer-g0`, `poller-n3`, `watch-transfer`), so
// that `ps -L`, `top -H` and a debugger tell the threads apart; the kernel
// keeps 15 characters.
void NameThisThread(const std::string& name);

// Moves a helper thread (a watch, the front door's BUSY answerer) onto the
// CPUs that TUTORIAL_HELPER_CPUS lists ("0,2,4-6"), when it is set: a helper
// that wakes every few milliseconds on a writer's CPU preempts that writer each
// time, and an unpinned writer it pushed aside may land on another writer's
// CPU (tools/run_chapter.py sets it over simnic, where the writers have a
// CPU each and nothing to spare). Unset: nothing moves.
void MoveHelperThreadOffWriters();

// The calling thread's kernel id (gettid), cached per thread and inline:
// it is read on every provider call (CallMeter::Call, harness/call_meter.h).
inline int ThisThreadId() {
  thread_local const int tid = static_cast<int>(syscall(SYS_gettid));
  return tid;
}

// What the kernel says of one thread of this process, for the watchdogs:
// whether it exists, whether it is runnable (running, or waiting for a
// core: state R), whether it is stopped (T, t: a debugger or SIGSTOP), and
// the CPU time it has run so far.
struct ThreadSample {
  bool exists = false;
  bool runnable = false;
  bool stopped = false;
  uint64_t run_ns = 0;
};
ThreadSample SampleThread(int tid);

// Time a watchdog may count against a thread that has not moved. A watchdog
// exists to notice a thread that cannot go on (one spinning on a lock a dead
// peer holds, or blocked for good); a thread that simply got no core (a busy
// machine, a virtual CPU the hypervisor did not run, a pinned thread sharing
// its core with busier ones) or that a debugger stopped is not that, and the
// time it spends so does not count. Fed one sample of the thread per tick.
//
// Whether a thread ran during a tick needs its CPU time at both ends, so
// the first sample (after construction or Reset) only takes a baseline. And
// a tick counts for at most kLongestTickSeconds: when the watchdog itself got
// no core for a while, a thread that ran at the start of that long tick may
// have waited for a core for the rest of it (still inside the same call),
// which its CPU time does not tell. Seen under ThreadSanitizer on a loaded
// 2-core machine: one tick of over 10 s, counted whole, ended a client
// whose poller was merely preempted.
class ProgressClock {
 public:
  static constexpr double kLongestTickSeconds = 1.0;
  // Adds `tick_seconds` (at most kLongestTickSeconds) unless the thread was
  // starved or stopped during the tick: runnable (or stopped) with no CPU
  // time since the previous sample. A thread that is gone, or that the
  // kernel does not describe, counts.
  void Tick(double tick_seconds, const ThreadSample& sample);
  void Reset() { *this = ProgressClock(); }
  double seconds() const { return seconds_; }
  // For the watchdogs' messages: the ticks that counted, and the longest
  // tick seen (before the cap).
  int counted_ticks() const { return counted_ticks_; }
  double longest_tick() const { return longest_tick_; }

 private:
  double seconds_ = 0;
  bool have_last_ = false;
  uint64_t last_run_ns_ = 0;
  int counted_ticks_ = 0;
  double longest_tick_ = 0;
};

}  // namespace tutorial
