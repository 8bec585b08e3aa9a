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
#include "common/node.h"
#include "common/progress.h"

namespace tutorial {

// What the server attaches to a job (common/server.cc): how each writer
// thread ran, and the drain once the writer is done.
class WriteJobHooks {
 public:
  // The first call of UseGpuOnThisThread() on a thread of the writer's own.
  virtual void WriterThreadStarted(size_t gpu) = 0;
  virtual void WriterDone() = 0;

 protected:
  ~WriteJobHooks() = default;
};

// Everything a chapter's writer needs for one client's request.
class WriteJob {
 public:
  // `abandon`, when given, is raised by whoever watches the transfer (a
  // client that stopped answering); Interrupted() reports it.
  WriteJob(Node& node, const ConnectMessage& connect, const RandomFillRequest& request,
           uint64_t repeat, std::vector<fi_addr_t> peers, ProgressLine& progress,
           const std::atomic<bool>* abandon = nullptr, WriteJobHooks* hooks = nullptr);

  size_t num_gpus() const { return num_gpus_; }
  size_t nics_per_gpu() const { return nics_per_gpu_; }
  size_t num_nics() const { return num_gpus_ * nics_per_gpu_; }
  size_t buffers_per_gpu() const { return buffers_per_gpu_; }
  uint64_t page_size() const { return page_size_; }
  uint64_t num_pages() const { return num_pages_; }
  uint64_t repeat() const { return repeat_; }
  uint64_t ops_per_gpu() const { return buffers_per_gpu_ * num_pages_ * repeat_; }
  uint64_t total_ops() const { return num_gpus_ * ops_per_gpu(); }

  NetworkGroup& group(size_t gpu) { return groups_[gpu]; }
  // Makes the GPU current on the calling thread: a thread that polls a
  // GPU's NICs must, because providers issue CUDA calls from it.
  void UseGpuOnThisThread(size_t gpu);
  // Physical cores of the GPU's NUMA node set aside for it (for pinning).
  const std::vector<int>& cores(size_t gpu) const { return node_.groups()[gpu].cores; }

  // Page `page` of buffer `buf` of GPU `gpu`, written through the group's
  // NIC `nic` into the client's slot for that page.
  RdmaWrite MakeWrite(size_t gpu, size_t nic, size_t buf, size_t page) const {
    RdmaWrite write = targets_[(gpu * nics_per_gpu_ + nic) * buffers_per_gpu_ + buf];
    write.local = static_cast<const char*>(write.local) + page * page_size_;
    write.remote_addr += uint64_t{page_indices_[page]} * page_size_;
    return write;
  }

  ProgressLine& progress() { return progress_; }
  Node& node() { return node_; }

  // Ctrl-C or SIGTERM, or the client stopped answering: writers stop and
  // report the transfer as abandoned. Cheap enough to ask on every loop.
  bool Interrupted() const;
  // Called by RunServer once the writer's Run() has returned, before the
  // writer goes: completions still in flight may call back into it.
  void WriterDone();

 private:
  Node& node_;
  std::vector<NetworkGroup>& groups_;
  uint64_t repeat_;
  ProgressLine& progress_;
  const std::atomic<bool>* abandon_;
  WriteJobHooks* hooks_;
  size_t num_gpus_, nics_per_gpu_, buffers_per_gpu_;
  uint64_t page_size_, num_pages_;
  const uint32_t* page_indices_;  // the client's slot of each page
  // Each (GPU, NIC, buffer)'s first page and the client's region for it.
  std::vector<RdmaWrite> targets_;
};

// What a writer reports back. `stats` covers the timed part (after warmup).
struct WriteOutcome {
  bool ok = true;
  std::string error;
  TransferStats stats;
};

using WriterFn = std::function<WriteOutcome(WriteJob&)>;

// Parses the command line, sets up, serves clients one after another.
// `setup` is the chapter's choice of library mechanisms (NetworkSetup).
// Returns the process's exit code.
int ServerMain(int argc, char** argv, const std::string& chapter, const WriterFn& run_writer,
               const NetworkSetup& setup);

// A chapter's main(): `Writer` is constructed from the WriteJob and its
// Run() returns the WriteOutcome. The writer stays alive until the NICs have
// drained, because a failed transfer can leave completions in flight that
// still call back into it. `setup`: the series' mechanisms unless the
// chapter says otherwise (chapters 16 on).
template <typename Writer>
int RunServer(int argc, char** argv, const std::string& chapter, const NetworkSetup& setup = {}) {
  return ServerMain(
      argc, argv, chapter,
      [](WriteJob& job) {
        Writer writer(job);
        WriteOutcome outcome;
        try {
          outcome = writer.Run();
        } catch (const std::exception& e) {
          outcome.ok = false;
          outcome.error = e.what();
        }
        job.WriterDone();
        return outcome;
      },
      setup);
}

}  // namespace tutorial
