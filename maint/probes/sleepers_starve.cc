// Does this kernel starve a process whose neighbours mix pinned busy threads
// with threads that sleep and wake often? (docs/simnic.md, "Why CI's chapter
// 12 still stalled".) Starts `--processes` processes, each in a session of
// its own (an autogroup, as two terminals or the tests' processes are),
// each with two busy threads pinned to CPUs 0 and 1 and `--sleepers`
// threads that loop on 2 us of work and a sleep of `--sleep-us`. Prints,
// per second, the work each process's busy threads did (millions of loop
// turns): a column of zeros is a thread that got no CPU for that second.
//
//   bazel run //maint/probes:sleepers_starve -- --sleepers 2 --sleep-us 5
//   bazel run //maint/probes:sleepers_starve -- --sleepers 0   # the control
//
// Linux 6.18 (2026-11-28, 2 cores, 6 s runs): with two sleepers of 5 us or
// of 1 ms, at least two of the four processes did nothing for whole runs on
// one CPU; with none, or two of 20 ms, every busy thread turned more than
// a million times every second.
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int processes = 4;
  int sleepers = 2;
  int sleep_us = 5;
  int seconds = 10;
};

[[noreturn]] void Usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: sleepers_starve [--processes N] [--sleepers N] [--sleep-us N] "
               "[--seconds N]\n"
               "  defaults: 4 processes, 2 sleepers each, 5 us sleeps, 10 s; needs 2 CPUs\n");
  std::exit(code);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") Usage(0);
    if (i + 1 >= argc) Usage(2);
    char* end = nullptr;
    long value = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || value < 0 || value > 1000000) Usage(2);
    if (flag == "--processes" && value >= 1 && value <= 16) {
      o.processes = static_cast<int>(value);
    } else if (flag == "--sleepers" && value <= 8) {
      o.sleepers = static_cast<int>(value);
    } else if (flag == "--sleep-us" && value >= 1) {
      o.sleep_us = static_cast<int>(value);
    } else if (flag == "--seconds" && value >= 1 && value <= 600) {
      o.seconds = static_cast<int>(value);
    } else {
      Usage(2);
    }
  }
  return o;
}

// One process: prints "<index> <second>: <busy 0> <busy 1>" each second.
void RunOne(int index, const Options& o) {
  setsid();
  static std::atomic<long> turns[2];
  for (int b = 0; b < 2; ++b) {
    std::thread([b] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(b, &set);
      pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      for (;;) turns[b].fetch_add(1, std::memory_order_relaxed);
    }).detach();
  }
  for (int s = 0; s < o.sleepers; ++s) {
    std::thread([sleep_us = o.sleep_us] {
      for (;;) {
        auto start = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - start < std::chrono::microseconds(2)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      }
    }).detach();
  }
  long last[2] = {0, 0};
  for (int second = 1; second <= o.seconds; ++second) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    long now[2] = {turns[0].load(), turns[1].load()};
    std::printf("process %d, second %2d: busy on CPU 0 %6.1f, on CPU 1 %6.1f\n", index, second,
                (now[0] - last[0]) / 1e6, (now[1] - last[1]) / 1e6);
    std::fflush(stdout);
    last[0] = now[0];
    last[1] = now[1];
  }
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  if (std::thread::hardware_concurrency() < 2) {
    std::fprintf(stderr, "sleepers_starve: needs 2 CPUs (its busy threads pin to CPUs 0 and 1)\n");
    return 1;
  }
  std::printf("%d processes x (2 pinned busy threads + %d sleepers of %d us), %d s\n", o.processes,
              o.sleepers, o.sleep_us, o.seconds);
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int p = 0; p < o.processes; ++p) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("sleepers_starve: fork");
      break;
    }
    if (pid == 0) RunOne(p, o);
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
    }
  }
  return failed == 0 && static_cast<int>(children.size()) == o.processes ? 0 : 1;
}
