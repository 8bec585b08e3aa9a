// The server program, minus the part each chapter is about.
//
// Common code waits for a client's CONNECT and RANDOM_FILL, checks them,
// fills the GPU buffers, adds the client's endpoints to the address vectors
// and, once the chapter's writer is done, tells the client so. The chapter
// supplies the writer: the warmup, the WRITE loop and how it is threaded,
// which is where the series spends its chapters.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/messages.h"
#include "common/network.h"
#include "common/network_group.h"
#include "common/node.h"
#include "common/progress.h"
#include "common/recovery.h"
#include "common/thread_stats.h"

namespace tutorial {

// Everything a chapter's writer needs for one client's request.
class WriteJob {
 public:
  // `abandon`, when given, is raised by whoever watches the transfer (a
  // client that stopped answering); Interrupted() reports it.
  WriteJob(Node& node, const ConnectMessage& connect, const RandomFillRequest& request,
           uint64_t repeat, std::vector<fi_addr_t> peers, ProgressLine& progress,
           const std::atomic<bool>* abandon = nullptr);

  size_t num_gpus() const { return num_gpus_; }
  size_t nics_per_gpu() const { return nics_per_gpu_; }
  size_t num_nics() const { return num_gpus_ * nics_per_gpu_; }
  size_t buffers_per_gpu() const { return buffers_per_gpu_; }
  uint64_t page_size() const { return request_.page_size; }
  uint64_t num_pages() const { return request_.num_pages(); }
  uint64_t repeat() const { return repeat_; }
  uint64_t ops_per_gpu() const { return buffers_per_gpu_ * num_pages() * repeat_; }
  uint64_t total_ops() const { return num_gpus_ * ops_per_gpu(); }

  NetworkGroup& group(size_t gpu) { return node_.net_groups()[gpu]; }
  // Makes the GPU current on the calling thread: a thread that polls a
  // GPU's NICs must, because providers issue CUDA calls from it.
  void UseGpuOnThisThread(size_t gpu) const;
  // Physical cores of the GPU's NUMA node set aside for it (for pinning).
  const std::vector<int>& cores(size_t gpu) const { return node_.groups()[gpu].cores; }

  // Page `page` of buffer `buf` of GPU `gpu`, written through the group's
  // NIC `nic` into the client's slot for that page.
  RdmaWrite MakeWrite(size_t gpu, size_t nic, size_t buf, size_t page) const;

  ProgressLine& progress() { return progress_; }
  Node& node() { return node_; }

  // Every writer thread (and a writer that runs on the calling thread)
  // holds one of these while it runs: its CPU time, involuntary switches
  // and migrations go into the transfer's counters.
  class ThreadStats {
   public:
    explicit ThreadStats(WriteJob& job) : job_(job), start_(SampleThisThread()) {}
    ~ThreadStats() { job_.AddThreadUsage(SampleThisThread() - start_); }
    ThreadStats(const ThreadStats&) = delete;
    ThreadStats& operator=(const ThreadStats&) = delete;

   private:
    WriteJob& job_;
    ThreadUsage start_;
  };
  void AddThreadUsage(const ThreadUsage& usage);
  ThreadUsage thread_usage() const;
  // Ctrl-C or SIGTERM, or the client stopped answering: writers stop and
  // report the transfer as abandoned. Cheap enough to ask on every loop.
  bool Interrupted() const;

  // For exercise 11.1 only (docs/11_multithread.md), which an edit calls
  // right after a writer has posted its warmup: it makes the race between
  // the last poster's store and another thread's Fail() happen the same way
  // every time. GPU 1's thread waits until GPU 0's has posted and gets true
  // (fail now); GPU 0's waits (30 s at most) until a writer thread has
  // ended, then gets false; any other GPU's gets false at once.
  bool StagedFailureAfterWarmup(size_t gpu_idx);

 private:
  Node& node_;
  const ConnectMessage& connect_;
  const RandomFillRequest& request_;
  uint64_t repeat_;
  std::vector<fi_addr_t> peers_;  // client endpoint of each of our NICs
  ProgressLine& progress_;
  const std::atomic<bool>* abandon_;
  size_t num_gpus_, nics_per_gpu_, buffers_per_gpu_;
  mutable std::mutex usage_mutex_;
  ThreadUsage usage_{0, 0, 0, 0};  // all zero: migrations known until a thread says not
  size_t threads_ended_ = 0;       // writer threads whose ThreadStats ended (usage_mutex_)
  std::atomic<bool> staged_gpu0_posted_{false};
};

// What a writer reports back. `stats` covers the timed part (after warmup);
// `counters` and `threads` the writer's whole run, warmup included.
struct WriteOutcome {
  bool ok = true;
  std::string error;
  TransferStats stats;
  NetworkCounters counters;  // summed over the NICs
  ThreadUsage threads;       // summed over the writer threads
};

using WriterFn = std::function<WriteOutcome(WriteJob&)>;

// Parses the command line, sets up, serves clients one after another.
// `network_options` are the chapter's choice of library mechanisms.
// Returns the process's exit code.
int ServerMain(int argc, char** argv, const std::string& chapter, const WriterFn& run_writer,
               const NetworkOptions& network_options);

// The NICs' counters summed (safe while writers run).
NetworkCounters SumCounters(Node& node);
// Restarts the NICs' peak counters and returns SumCounters: call it before
// the writer threads start; the transfer's counters are SumCounters()
// after it minus this.
NetworkCounters StartCounting(Node& node);

// A chapter's main(): `Writer` is constructed from the WriteJob and its
// Run() returns the WriteOutcome. The writer stays alive until the NICs have
// drained, because a failed transfer can leave completions in flight that
// still call back into it. `network_options`: the series' mechanisms unless
// the chapter says otherwise (chapters 16 on).
template <typename Writer>
int RunServer(int argc, char** argv, const std::string& chapter,
              const NetworkOptions& network_options = {}) {
  return ServerMain(
      argc, argv, chapter,
      [](WriteJob& job) {
        NetworkCounters before = StartCounting(job.node());
        Writer writer(job);
        WriteOutcome outcome;
        try {
          outcome = writer.Run();
        } catch (const std::exception& e) {
          outcome.ok = false;
          outcome.error = e.what();
        }
        outcome.counters = SumCounters(job.node()) - before;
        outcome.threads = job.thread_usage();
        DrainTransmits(job.node(), kDrainSeconds);
        return outcome;
      },
      network_options);
}

}  // namespace tutorial
