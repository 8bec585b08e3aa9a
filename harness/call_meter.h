// Instrumentation, kept out of the teaching path: a Network's hooks
// (NicHarness, harness/recovery_nic.h) tell the meter about every provider
// call; it counts what the call did (docs/counters.md), samples the
// time it took, and tells the watchdogs that a thread is inside the provider.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "common/network.h"
#include "harness/cpu_ticks.h"
#include "harness/thread_stats.h"

namespace tutorial {

// What a Network counted: exact, on any provider. Only the Network's own
// thread writes them; relaxed atomics let a watcher read them safely.
struct NetworkCounters {
  uint64_t writes = 0;          // WRITEs the provider accepted
  uint64_t post_calls = 0;      // calls to post anything (accepted or not)
  uint64_t doorbells = 0;       // ...of them without FI_MORE (each rings the NIC)
  uint64_t eagain = 0;          // posts refused with -FI_EAGAIN
  uint64_t cq_reads = 0;        // fi_cq_read calls
  uint64_t cq_empty_reads = 0;  // ...that found nothing
  uint64_t cq_entries = 0;      // completions they returned
  uint64_t provider_ticks = 0;  // time inside those calls (ReadTicks units,
                                // sampled: one call in 13 is timed)
  uint64_t op_allocations = 0;  // heap allocations for operation contexts
  // The most WRITEs the writer handed one NIC (PostWrite calls, whether
  // the provider took them at once or later) between two reads of its CQ.
  // A peak, not a sum: adding takes the larger, a difference keeps the
  // later value (counted since ResetPeaks).
  uint64_t longest_write_run = 0;

  NetworkCounters& operator+=(const NetworkCounters& o);
  NetworkCounters operator-(const NetworkCounters& o) const;
};

// Set by a watchdog that is about to end or restart the process
// (harness/shutdown.cc): from then on a thread that would enter the provider
// waits for the end instead, so that no thread of ours is inside a provider
// call, holding a lock in a peer's shared memory (shm), when the process
// goes.
inline std::atomic<bool> provider_calls_frozen{false};
[[noreturn]] void WaitForTheEnd();

// The libfabric function of each kind, for messages.
inline const char* ProviderCallName(ProviderCall call) {
  switch (call) {
    case ProviderCall::kRecv:
      return "fi_recv";
    case ProviderCall::kSend:
      return "fi_send";
    case ProviderCall::kWrite:
      return "fi_writemsg";
    case ProviderCall::kCqRead:
      return "fi_cq_read";
    case ProviderCall::kCqReadErr:
      return "fi_cq_readerr";
  }
  return "a provider call";
}

class CallMeter {
 public:
  // A post refused before it reached the provider (its transmit queue
  // holds the depth it advertised): counted as the provider's -FI_EAGAIN
  // at that depth would be, without a call for the watchdogs to see.
  ssize_t Refused() {
#ifndef TUTORIAL_NO_COUNTERS
    Bump(c_.post_calls);
    Bump(c_.eagain);
#endif
    return -FI_EAGAIN;
  }
  // An operation context handed out: `allocated` when that took the heap
  // (the series' `new RdmaOp`, or a new chunk of chapter 17's pool).
  void OpCreated(bool is_write, bool allocated) {
#ifndef TUTORIAL_NO_COUNTERS
    if (allocated) Bump(c_.op_allocations);
    if (is_write && ++writes_since_cq_read_ > c_.longest_write_run.load(kRelaxed)) {
      c_.longest_write_run.store(writes_since_cq_read_, kRelaxed);
    }
#else
    (void)is_write;
    (void)allocated;
#endif
  }

  // A copy of the counters; safe from any thread.
  NetworkCounters counters() const;
  // Starts the peak counters (longest_write_run) afresh, for a new transfer.
  // Call it from the thread that uses the Network, or before that starts.
  void ResetPeaks();

  // For the watchdogs: provider calls begun and finished (a thread inside
  // one has started != finished; a pair frozen so means it is stuck there)
  // and the thread that made the latest call (a kernel thread id), and
  // which call that was.
  uint64_t started() const { return started_.load(kRelaxed); }
  uint64_t finished() const { return finished_.load(kRelaxed); }
  int caller() const { return caller_tid_.load(kRelaxed); }
  ProviderCall latest_call() const { return static_cast<ProviderCall>(kind_.load(kRelaxed)); }

  // Around one provider call: Begin returns what End takes as `start`.
  // `flags` are a post's flags (FI_MORE: no doorbell).
  uint64_t Begin(ProviderCall kind) {
    if (provider_calls_frozen.load(kRelaxed)) WaitForTheEnd();
    uint64_t start = 0;
#ifndef TUTORIAL_NO_COUNTERS
    if (started_.load(kRelaxed) % kTimedCallEvery == 0) start = ReadTicks();
#endif
    caller_tid_.store(ThisThreadId(), kRelaxed);
    kind_.store(static_cast<uint8_t>(kind), kRelaxed);
    Bump(started_);
    return start;
  }

  // Built with -DTUTORIAL_NO_COUNTERS the counters vanish, so that their own
  // cost can be measured (docs/counters.md); the watchdogs' pair
  // stays.
  void End(ProviderCall kind, uint64_t flags, ssize_t ret, uint64_t start) {
#ifndef TUTORIAL_NO_COUNTERS
    if (start != 0) Bump(c_.provider_ticks, (ReadTicks() - start) * kTimedCallEvery);
    switch (kind) {
      case ProviderCall::kRecv:
      case ProviderCall::kSend:
      case ProviderCall::kWrite:
        Bump(c_.post_calls);
        if (ret == -FI_EAGAIN) {
          Bump(c_.eagain);
        } else if (ret >= 0) {
          // Only a post the provider took rings the doorbell (EFA's and
          // simnic's refused posts never reach the NIC).
          if ((flags & FI_MORE) == 0) Bump(c_.doorbells);
          if (kind == ProviderCall::kWrite) Bump(c_.writes);
        }
        break;
      case ProviderCall::kCqRead:
        Bump(c_.cq_reads);
        writes_since_cq_read_ = 0;
        if (ret == -FI_EAGAIN) Bump(c_.cq_empty_reads);
        if (ret > 0) Bump(c_.cq_entries, static_cast<uint64_t>(ret));
        break;
      case ProviderCall::kCqReadErr:
        break;
    }
#else
    (void)kind;
    (void)flags;
    (void)ret;
    (void)start;
#endif
    Bump(finished_);
  }

 private:
  static constexpr std::memory_order kRelaxed = std::memory_order_relaxed;
  // Reading the clock around every call would cost more than some of the
  // calls; one call in kTimedCallEvery is timed and counts for all of them
  // (a prime, so that no loop's period of posts and polls hides in it).
  static constexpr uint64_t kTimedCallEvery = 13;

  // One writer (the thread using the Network), readers anywhere: a relaxed
  // load and store compile to a plain add and keep the reads well-defined.
  static void Bump(std::atomic<uint64_t>& counter, uint64_t by = 1) {
    counter.store(counter.load(kRelaxed) + by, kRelaxed);
  }

  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> finished_{0};
  std::atomic<int> caller_tid_{0};
  std::atomic<uint8_t> kind_{0};
  struct {
    std::atomic<uint64_t> writes{0}, post_calls{0}, doorbells{0}, eagain{0}, cq_reads{0},
        cq_empty_reads{0}, cq_entries{0}, provider_ticks{0}, op_allocations{0},
        longest_write_run{0};
  } c_;
  uint64_t writes_since_cq_read_ = 0;
};

}  // namespace tutorial
