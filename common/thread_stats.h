// What the operating system did to a thread: CPU time, involuntary context
// switches, migrations between cores. Chapter 12 (pinning) moves the last
// two; the counters on every result line show it.
#pragma once

#include <cstdint>

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

}  // namespace tutorial
