#include "harness/thread_stats.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "harness/cpu_ticks.h"

namespace tutorial {

ThreadUsage ThreadUsage::operator-(const ThreadUsage& earlier) const {
  ThreadUsage d;
  d.wall_ticks = wall_ticks - earlier.wall_ticks;
  d.cpu_ns = cpu_ns - earlier.cpu_ns;
  d.involuntary_switches = involuntary_switches - earlier.involuntary_switches;
  d.migrations = migrations >= 0 && earlier.migrations >= 0 ? migrations - earlier.migrations : -1;
  return d;
}

void NameThisThread(const std::string& name) {
  // Only a name for people: a failure (a name too long) changes nothing else.
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

void MoveHelperThreadOffWriters() {
  const char* list = std::getenv("TUTORIAL_HELPER_CPUS");
  if (list == nullptr || *list == 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const char* p = list; *p != 0;) {
    char* end = nullptr;
    long first = std::strtol(p, &end, 10);
    long last = first;
    if (end == p || first < 0 || first >= CPU_SETSIZE) return;  // not a CPU list: stay
    if (*end == '-') {
      p = end + 1;
      last = std::strtol(p, &end, 10);
      if (end == p || last < first || last >= CPU_SETSIZE) return;
    }
    for (long cpu = first; cpu <= last; ++cpu) CPU_SET(static_cast<int>(cpu), &set);
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != 0) return;
  }
  // A failure (a CPU this process may not use) leaves the thread where it was.
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
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

ThreadSample SampleThread(int tid) {
  ThreadSample sample;
  if (tid <= 0) return sample;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return sample;
  char line[1024];
  bool read = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  // "tid (comm) S ...": the name may hold spaces and parentheses, so the
  // state is the first field after the last ')'.
  const char* close = read ? std::strrchr(line, ')') : nullptr;
  if (close == nullptr || close[1] != ' ') return sample;
  char state = close[2];
  sample.exists = true;
  sample.runnable = state == 'R';
  sample.stopped = state == 'T' || state == 't';
  // Time on a CPU in nanoseconds (CONFIG_SCHED_INFO); else utime + stime.
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
  if (FILE* s = std::fopen(path, "r")) {
    unsigned long long run = 0;
    if (std::fscanf(s, "%llu", &run) == 1) sample.run_ns = run;
    std::fclose(s);
    return sample;
  }
  unsigned long long utime = 0, stime = 0;
  // Fields 14 and 15 of stat; field 3 (the state) is at close + 2.
  if (std::sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) == 2) {
    sample.run_ns =
        (utime + stime) * (1000000000ull / static_cast<unsigned long long>(sysconf(_SC_CLK_TCK)));
  }
  return sample;
}

void ProgressClock::Tick(double tick_seconds, const ThreadSample& sample) {
  longest_tick_ = std::max(longest_tick_, tick_seconds);
  bool baseline_only = sample.exists && !have_last_;
  bool ran = have_last_ && sample.run_ns != last_run_ns_;
  have_last_ = sample.exists;
  last_run_ns_ = sample.run_ns;
  if (baseline_only) return;
  bool starved = sample.exists && (sample.runnable || sample.stopped) && !ran;
  if (starved) return;
  seconds_ += std::min(tick_seconds, kLongestTickSeconds);
  ++counted_ticks_;
}

}  // namespace tutorial
