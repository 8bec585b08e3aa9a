#include "common/thread_stats.h"

#include <sys/resource.h>
#include <time.h>

#include <cstdio>
#include <cstring>

#include "common/cpu_ticks.h"

namespace tutorial {

ThreadUsage ThreadUsage::operator-(const ThreadUsage& earlier) const {
  ThreadUsage d;
  d.wall_ticks = wall_ticks - earlier.wall_ticks;
  d.cpu_ns = cpu_ns - earlier.cpu_ns;
  d.involuntary_switches = involuntary_switches - earlier.involuntary_switches;
  d.migrations = migrations >= 0 && earlier.migrations >= 0 ? migrations - earlier.migrations : -1;
  return d;
}

ThreadUsage SampleThisThread() {
  ThreadUsage usage;
  usage.wall_ticks = ReadTicks();
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
    usage.cpu_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
  }
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) == 0) usage.involuntary_switches = ru.ru_nivcsw;
  // The scheduler's own count; present where the kernel has
  // CONFIG_SCHED_DEBUG (most distribution kernels).
  if (FILE* f = std::fopen("/proc/thread-self/sched", "r")) {
    char line[256];
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::strncmp(line, "se.nr_migrations", 16) != 0) continue;
      const char* colon = std::strchr(line, ':');
      long long value = 0;
      if (colon != nullptr && std::sscanf(colon + 1, "%lld", &value) == 1) usage.migrations = value;
      break;
    }
    std::fclose(f);
  }
  return usage;
}

}  // namespace tutorial
