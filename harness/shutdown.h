// Ending a program cleanly, whatever happens.
//
// Ctrl-C and SIGTERM ask the program to stop; loops check StopRequested()
// and unwind normally, so every libfabric and CUDA handle is closed by its
// destructor (and shm leaves no files behind).
//
// One thing no loop of ours can end is a thread stuck inside the provider.
// shm keeps its queues in shared memory behind spin locks: a peer killed or
// stopped while it holds one leaves every later write to it spinning; and
// libfabric 1.17 (1.22 too, the code is the same) copies a message longer
// than the receive posted for it in an endless loop, holding its own lock.
// The ProviderWatchdog notices a provider call that has not returned for a
// while (time in which the calling thread got no core does not count:
// harness/thread_stats.h) and ends the process with one line on stderr,
// shm's files removed, and exit code kExitProviderFailed
// (harness/main_guard.h).
//
// Why it ends rather than restarts in place: a process that re-executes
// itself keeps its pid, signal mask, CPU affinity and open descriptors
// unless each is put back by hand, and libfabric's state in other
// processes (shm's maps of our files, tcp's connections) still points at
// the old one. A new process started by a supervisor has none of that, on
// every provider and libfabric version; it gets a new address, which it
// prints and writes to --address-file. How to run one:
// docs/provider-failures.md, "Under a supervisor". A lost client, the
// common case, ends nothing: only the data endpoints are rebuilt
// (harness/recovery.h).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tutorial {

class Network;

void InstallStopHandlers();
bool StopRequested();

// What a stuck process does besides ending.
struct StuckPolicy {
  // Runs (on the watchdog's thread) right before the process exits: e.g. a
  // client removes the files of a server that died holding the lock it is
  // stuck on (harness/recovery.h).
  std::function<void()> before_exit;
};

// What the watchdog says of a stuck thread of this process (a kernel thread
// id), on one line: its name, its state, what it waits in, its system call
// and its stack (innermost first) when it takes a signal within 1 s, e.g.
// "thread 1234 (writer-g0): state S, waits in futex_wait_queue, system call
// 202; stack: f+0x1c (lib.so) < g+0x40 (lib.so) < ...". Instrumentation:
// slow (it waits for the thread), for a process about to end.
std::string DescribeStuckThread(int tid);

class ProviderWatchdog {
 public:
  // Watches `networks` (which must outlive it) from a thread of its own.
  ProviderWatchdog(std::string program, std::vector<Network*> networks, double stuck_seconds,
                   StuckPolicy policy = {});
  ~ProviderWatchdog();
  ProviderWatchdog(const ProviderWatchdog&) = delete;
  ProviderWatchdog& operator=(const ProviderWatchdog&) = delete;

 private:
  void Watch();
  // Before the process goes: new provider calls wait for the end, calls
  // under way (but the stuck one's) get a moment to return.
  void LetCallsReturn(size_t stuck);
  // `looks`: the watchdog's samples that counted; `longest_look`: the
  // longest time between two of them (for the message).
  [[noreturn]] void EndStuck(size_t index, int looks, double longest_look);

  std::string program_;
  std::vector<Network*> networks_;
  double stuck_seconds_;
  StuckPolicy policy_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// Removes the files the provider keeps for `network` outside the process
// (shm's /dev/shm/<name>), for an exit that skips the destructors.
void UnlinkProviderFiles(const Network& network);

}  // namespace tutorial
