// Chapter 13: shard.
//
// Every thread counts its own GPU's posted and finished WRITEs in counters
// nobody else writes: no atomic read-modify-write on the hot path. The
// threads meet only once, when a GPU is done (an atomic count of finished
// GPUs), and when a progress line sums the shards.
#include "common/server.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using tutorial::Clock;
using tutorial::Network;
using tutorial::RdmaOp;
using tutorial::WriteJob;
using tutorial::WriteOutcome;

// The in-flight window: a GPU's thread stops posting while one NIC of its
// group has this many WRITEs waiting in our queue for the provider.
constexpr size_t kMaxPendingWrites = 64;

class RandomFillWriter {
 public:
  explicit RandomFillWriter(WriteJob& job)
      : job_(job), write_states_(job.num_gpus()), counters_(job.num_gpus()) {}

  WriteOutcome Run() {
    std::vector<std::thread> threads;
    threads.reserve(job_.num_gpus());
    std::set<int> distinct_cpus;
    for (size_t gpu_idx = 0; gpu_idx < job_.num_gpus(); ++gpu_idx) {
      // Any core of the group will do; the middle one, as the series does.
      const auto& cpus = job_.cores(gpu_idx);
      int preferred_cpu = cpus.empty() ? -1 : cpus[cpus.size() / 2];
      distinct_cpus.insert(preferred_cpu);
      threads.emplace_back([this, gpu_idx, preferred_cpu] {
        PinThisThread(preferred_cpu);
        job_.UseGpuOnThisThread(gpu_idx);
        auto& nets = job_.group(gpu_idx).nets;
        while (state_ != State::kDone) {
          if (job_.Interrupted()) Fail("interrupted");
          for (Network* net : nets) net->PollCompletion();
          switch (state_) {
            case State::kPostWarmup:
              PostWarmup(gpu_idx);
              break;
            case State::kWaitWarmup:
              break;
            case State::kWrite:
              ContinuePostWrite(gpu_idx);
              break;
            case State::kDone:
              break;
          }
        }
      });
    }
    if (distinct_cpus.size() < job_.num_gpus()) {
      std::printf(
          "Note: %zu GPU threads share %zu core(s); this machine has fewer cores than "
          "groups.\n",
          job_.num_gpus(), distinct_cpus.size());
    }
    for (auto& t : threads) t.join();
    return outcome_;
  }

 private:
  enum class State {
    kPostWarmup,
    kWaitWarmup,
    kWrite,
    kDone,
  };

  struct WriteState {
    bool warmup_posted = false;
    size_t i_repeat = 0;
    size_t i_buf = 0;
    size_t i_page = 0;
  };

  // One GPU's counters. Only its own thread writes them; other threads read
  // them for the progress line. Relaxed atomic loads and stores compile to
  // plain moves on x86 but keep those reads well-defined (and TSan quiet).
  // As in the series, a plain array: neighbouring GPUs' counters share a
  // cache line (docs/13_shard.md has the exercise that separates them).
  struct GpuCounters {
    std::atomic<uint64_t> posted_write_ops = 0;
    std::atomic<uint64_t> finished_write_ops = 0;
  };

  static uint64_t Bump(std::atomic<uint64_t>& counter) {
    uint64_t value = counter.load(std::memory_order_relaxed) + 1;
    counter.store(value, std::memory_order_relaxed);
    return value;
  }

  uint64_t SumPosted() const {
    uint64_t sum = 0;
    for (const auto& c : counters_) sum += c.posted_write_ops.load(std::memory_order_relaxed);
    return sum;
  }

  uint64_t SumFinished() const {
    uint64_t sum = 0;
    for (const auto& c : counters_) sum += c.finished_write_ops.load(std::memory_order_relaxed);
    return sum;
  }

  static void PinThisThread(int cpu) {
    if (cpu < 0) return;  // the topology knows no core for this group
    cpu_set_t cpuset;
    CPU_ZERO(&cpuset);
    CPU_SET(cpu, &cpuset);
    int err = pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), &cpuset);
    if (err != 0)
      std::fprintf(stderr, "server: cannot pin a thread to CPU %d (error %d)\n", cpu, err);
  }

  // The warmup: one WRITE through every NIC of the GPU into each of the
  // GPU's buffers. Every (NIC, buffer) pair is a memory region of its own on
  // the client, and some providers set up per-region state on first use
  // (shm opens a CUDA IPC handle), which belongs outside the timed part too.
  void PostWarmup(size_t gpu_idx) {
    WriteState& s = write_states_[gpu_idx];
    if (s.warmup_posted) return;
    auto& group = job_.group(gpu_idx);
    for (size_t k = 0; k < group.nets.size(); ++k) {
      size_t net_idx = group.GetNext();
      for (size_t buf_idx = 0; buf_idx < job_.buffers_per_gpu(); ++buf_idx) {
        group.nets[net_idx]->PostWrite(
            job_.MakeWrite(gpu_idx, net_idx, buf_idx, 0),
            [this](Network& net, RdmaOp& op) { HandleWarmupCompletion(net, op); });
      }
    }
    s.warmup_posted = true;
    if (++posted_warmups_ == job_.num_gpus()) {
      // Another thread may already have failed (Fail() set kDone): a plain
      // store would undo that, so step forward only from kPostWarmup.
      State expected = State::kPostWarmup;
      state_.compare_exchange_strong(expected, State::kWaitWarmup);
    }
  }

  void HandleWarmupCompletion(Network& net, RdmaOp& op) {
    if (!op.ok()) return Fail("warmup write on " + net.name() + ": " + op.error_message);
    if (++cnt_warmups_ < job_.num_nics() * job_.buffers_per_gpu()) return;
    std::printf("Warmup completed.\n");
    std::printf("Started RDMA WRITE to the remote memory.\n");
    job_.progress().Start();
    state_ = State::kWrite;
  }

  // Posts the GPU's next WRITE on the next NIC of its group.
  void ContinuePostWrite(size_t gpu_idx) {
    WriteState& s = write_states_[gpu_idx];
    if (s.i_repeat == job_.repeat()) return;
    auto& group = job_.group(gpu_idx);
    if (group.Backlogged(kMaxPendingWrites)) return;
    size_t net_idx = group.GetNext();
    group.nets[net_idx]->PostWrite(
        job_.MakeWrite(gpu_idx, net_idx, s.i_buf, s.i_page),
        [this, gpu_idx](Network& net, RdmaOp& op) { HandleWriteCompletion(gpu_idx, net, op); });
    Bump(counters_[gpu_idx].posted_write_ops);
    if (++s.i_page == job_.num_pages()) {
      s.i_page = 0;
      if (++s.i_buf == job_.buffers_per_gpu()) {
        s.i_buf = 0;
        ++s.i_repeat;
      }
    }
  }

  void HandleWriteCompletion(size_t gpu_idx, Network& net, RdmaOp& op) {
    if (!op.ok()) return Fail("write on " + net.name() + ": " + op.error_message);
    uint64_t gpu_finished_ops = Bump(counters_[gpu_idx].finished_write_ops);
    if (gpu_finished_ops % 16384 == 0) {
      // Other shards are read without waiting for them: close enough for a
      // progress line.
      job_.progress().Print(Clock::now(), SumPosted(), SumFinished());
    }
    if (gpu_finished_ops == job_.ops_per_gpu()) {
      if (++cnt_finished_gpus_ == job_.num_gpus()) {
        outcome_.stats = job_.progress().Finish(Clock::now(), job_.total_ops());
        state_ = State::kDone;
      }
    }
  }

  void Fail(const std::string& error) {
    std::lock_guard<std::mutex> lock(fail_mutex_);
    if (outcome_.ok) {
      outcome_.ok = false;
      outcome_.error = error;
    }
    state_ = State::kDone;
  }

  WriteJob& job_;
  std::atomic<State> state_ = State::kPostWarmup;
  std::vector<WriteState> write_states_;
  std::atomic<size_t> posted_warmups_ = 0;
  std::atomic<size_t> cnt_warmups_ = 0;
  std::vector<GpuCounters> counters_;
  std::atomic<size_t> cnt_finished_gpus_ = 0;
  std::mutex fail_mutex_;
  WriteOutcome outcome_;
};

}  // namespace

int main(int argc, char** argv) {
  return tutorial::RunServer<RandomFillWriter>(argc, argv, "13_shard");
}
