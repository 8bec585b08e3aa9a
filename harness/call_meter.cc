#include "harness/call_meter.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace tutorial {

void WaitForTheEnd() {
  for (;;) pause();  // the process ends or is replaced (execve) soon
}

double TicksPerNanosecond() {
  static const double ticks_per_ns = [] {
    auto wall_start = std::chrono::steady_clock::now();
    uint64_t start = ReadTicks();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    uint64_t end = ReadTicks();
    double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - wall_start)
            .count();
    return ns > 0 ? static_cast<double>(end - start) / ns : 1.0;
  }();
  return ticks_per_ns;
}

NetworkCounters& NetworkCounters::operator+=(const NetworkCounters& o) {
  writes += o.writes;
  post_calls += o.post_calls;
  doorbells += o.doorbells;
  eagain += o.eagain;
  cq_reads += o.cq_reads;
  cq_empty_reads += o.cq_empty_reads;
  cq_entries += o.cq_entries;
  provider_ticks += o.provider_ticks;
  op_allocations += o.op_allocations;
  longest_write_run = std::max(longest_write_run, o.longest_write_run);
  return *this;
}

NetworkCounters NetworkCounters::operator-(const NetworkCounters& o) const {
  NetworkCounters d;
  d.writes = writes - o.writes;
  d.post_calls = post_calls - o.post_calls;
  d.doorbells = doorbells - o.doorbells;
  d.eagain = eagain - o.eagain;
  d.cq_reads = cq_reads - o.cq_reads;
  d.cq_empty_reads = cq_empty_reads - o.cq_empty_reads;
  d.cq_entries = cq_entries - o.cq_entries;
  d.provider_ticks = provider_ticks - o.provider_ticks;
  d.op_allocations = op_allocations - o.op_allocations;
  d.longest_write_run = longest_write_run;
  return d;
}

NetworkCounters CallMeter::counters() const {
  NetworkCounters c;
  c.writes = c_.writes.load(kRelaxed);
  c.post_calls = c_.post_calls.load(kRelaxed);
  c.doorbells = c_.doorbells.load(kRelaxed);
  c.eagain = c_.eagain.load(kRelaxed);
  c.cq_reads = c_.cq_reads.load(kRelaxed);
  c.cq_empty_reads = c_.cq_empty_reads.load(kRelaxed);
  c.cq_entries = c_.cq_entries.load(kRelaxed);
  c.provider_ticks = c_.provider_ticks.load(kRelaxed);
  c.op_allocations = c_.op_allocations.load(kRelaxed);
  c.longest_write_run = c_.longest_write_run.load(kRelaxed);
  return c;
}

void CallMeter::ResetPeaks() {
  writes_since_cq_read_ = 0;
  c_.longest_write_run.store(0, kRelaxed);
}

}  // namespace tutorial
