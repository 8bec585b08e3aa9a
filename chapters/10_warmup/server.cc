// Chapter 10: warmup.
//
// Before the timed WRITEs, every NIC writes one page into each of the
// client's buffers (the series: one page per NIC), so that connection
// set-up (address resolution, the provider's handshake, per-region state)
// happens before the clock starts instead of slowing the first seconds.
//
// One thread drives everything: it polls every NIC of every GPU and posts
// the next WRITE for each GPU in turn.
#include "common/server.h"

#include <chrono>
#include <cstdio>
#include <string>
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
  explicit RandomFillWriter(WriteJob& job) : job_(job), write_states_(job.num_gpus()) {}

  WriteOutcome Run() {
    while (state_ != State::kDone) {
      if (job_.Interrupted()) Fail("interrupted");
      for (size_t gpu_idx = 0; gpu_idx < job_.num_gpus(); ++gpu_idx) {
        // The provider's CUDA calls for this GPU's writes run on the
        // current device: switch to it (cheap) before touching its NICs.
        job_.UseGpuOnThisThread(gpu_idx);
        for (Network* net : job_.group(gpu_idx).nets) net->PollCompletion();
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
    }
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
    if (++posted_warmups_ == job_.num_gpus()) state_ = State::kWaitWarmup;
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
        [this](Network& net, RdmaOp& op) { HandleWriteCompletion(net, op); });
    ++posted_write_ops_;
    if (++s.i_page == job_.num_pages()) {
      s.i_page = 0;
      if (++s.i_buf == job_.buffers_per_gpu()) {
        s.i_buf = 0;
        ++s.i_repeat;
      }
    }
  }

  void HandleWriteCompletion(Network& net, RdmaOp& op) {
    if (!op.ok()) return Fail("write on " + net.name() + ": " + op.error_message);
    ++finished_write_ops_;
    if (finished_write_ops_ % 16384 == 0) {
      job_.progress().Print(Clock::now(), posted_write_ops_, finished_write_ops_);
    }
    if (finished_write_ops_ == job_.total_ops()) {
      outcome_.stats = job_.progress().Finish(Clock::now(), finished_write_ops_);
      state_ = State::kDone;
    }
  }

  void Fail(const std::string& error) {
    if (outcome_.ok) {
      outcome_.ok = false;
      outcome_.error = error;
    }
    state_ = State::kDone;
  }

  WriteJob& job_;
  State state_ = State::kPostWarmup;
  std::vector<WriteState> write_states_;
  size_t posted_warmups_ = 0;
  size_t cnt_warmups_ = 0;
  uint64_t posted_write_ops_ = 0;
  uint64_t finished_write_ops_ = 0;
  WriteOutcome outcome_;
};

}  // namespace

int main(int argc, char** argv) {
  return tutorial::RunServer<RandomFillWriter>(argc, argv, "10_warmup");
}
