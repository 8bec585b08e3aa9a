// A cheap clock for timing calls of a few nanoseconds: the CPU's time stamp
// counter where there is one (x86), else the steady clock in nanoseconds.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace tutorial {

inline uint64_t ReadTicks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
#endif
}

// Ticks per nanosecond, measured once (about 20 ms) on first use: call it
// before timing anything that matters.
double TicksPerNanosecond();

}  // namespace tutorial
