// One NIC as libfabric sees it: fabric, domain, completion queue, address
// vector and one reliable-datagram (RDM) endpoint, plus the bookkeeping that
// every chapter needs around them: operation contexts, a queue for posts the
// provider refused with -FI_EAGAIN, and completion polling.
//
// A Network is used by one thread at a time; chapters from 11 on give each
// thread its own Networks. How the Network talks to the provider is the
// chapter's choice (NetworkOptions): chapters 09-15 use the series'
// mechanisms, and each chapter from 16 on switches one of ours on.
//
// When a peer dies, providers differ (measured with libfabric 1.17):
//   tcp  fails every write in flight with an error completion that names
//        the operation, then answers -FI_EAGAIN to new posts for that peer.
//   shm  reports writes into a dead process as errors that name no
//        operation (an "orphan" error), keeps others in flight forever, or
//        answers -FI_EAGAIN forever once the dead peer's queue is full;
//        neither fi_cancel nor fi_av_remove flushes them.
// So a Network can cancel what it still queues itself, detach what the
// provider keeps (no callback can then reach a caller that is gone), and
// reset its endpoint, which makes the provider forget everything.
// Two shm hazards no Network can undo, only avoid or outlast: an address
// inserted for a process that does not exist crashes the first write once
// fi_av_remove has left a stale peer behind (so AddPeer checks the peer
// exists), and a thread can spin forever inside shm on a dead or stopped
// peer's lock (so ProviderWatchdog, common/shutdown.h, watches the calls).
// What the programs do about all this (watch, drain, rebuild, and the shm
// 1.17 bugs behind it) lives in common/recovery.h.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/fabric_handles.h"

namespace tutorial {

class Network;
struct RdmaOp;

// What a chapter asks of the library. The defaults are the series' own
// mechanisms (chapters 09-15); each later chapter turns on one field.
struct NetworkOptions {
  // FI_THREAD_SAFE (the series): the provider guards every call with a lock,
  // so any thread may call it. FI_THREAD_DOMAIN (chapter 16): the
  // application promises one thread per domain at a time, and the provider
  // may leave its locks out.
  fi_threading threading = FI_THREAD_SAFE;
  // false (the series): one `new RdmaOp` holding a std::function per
  // operation, deleted on completion. true (chapter 17): operations come
  // from a per-NIC pool and call a CompletionHandler: no heap allocation
  // and no std::function per operation.
  bool op_pool = false;
  // false (the series): every post rings the NIC's doorbell. true (chapter
  // 18): consecutive queued WRITEs go out flagged FI_MORE, the last of each
  // batch without it, so the doorbell rings once per batch.
  bool doorbell_batching = false;
};

// The libfabric API version we ask for: the newest our headers know, but
// no newer than the library we run against. EFA turns device RDMA (and so
// FI_HMEM and real RMA writes) on only for API >= 1.18 (efa_rdm_util.c,
// use_device_rdma), dma-buf registration only for >= 1.20 (efa_mr.c).
uint32_t RequestedApiVersion();
// The rule itself: `header_version` (FI_VERSION of the headers we were
// built with) capped by `library_version` (fi_version() at run time).
constexpr uint32_t ApiVersionFor(uint32_t header_version, uint32_t library_version) {
  return header_version < library_version ? header_version : library_version;
}
// The access bits every registration asks for (see Network::Register).
constexpr uint64_t kRegistrationAccess =
    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// A completion entry for a remote write into our memory, told by its flags
// as the series does: the efa fabric may leave a stale op_context there.
inline bool IsRemoteWrite(const fi_cq_data_entry& entry) {
  return (entry.flags & FI_REMOTE_WRITE) != 0 ||
         ((entry.flags & FI_REMOTE_CQ_DATA) != 0 && (entry.flags & FI_RECV) == 0);
}

using OpCallback = std::function<void(Network&, RdmaOp&)>;
// Called for every remote write that carried CQ data (the remote context).
using RemoteWriteCallback = std::function<void(Network&, uint64_t cq_data)>;
// Called for an error completion that names no operation of ours.
using OrphanErrorCallback = std::function<void(Network&, const std::string& error)>;

// A WRITE from local registered memory into a peer's registered memory.
struct RdmaWrite {
  const void* local = nullptr;
  size_t length = 0;
  void* local_desc = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint64_t remote_addr = 0;
  uint64_t remote_key = 0;
  bool has_cq_data = false;
  uint64_t cq_data = 0;  // delivered to the peer's CQ when has_cq_data
};

enum class OpType { kSend, kRecv, kWrite };

// Where an operation is: in our queue, with the provider, failed before the
// provider took it (reported at the next poll), or detached (still with the
// provider, but nobody waits for it any more).
enum class OpState : uint8_t { kFree, kQueued, kPosted, kFailed, kDetached };

// Chapter 17's alternative to a std::function per operation: one object
// (the writer) handles every completion, told apart by RdmaOp::user.
class CompletionHandler {
 public:
  virtual void OnCompletion(Network& net, RdmaOp& op) = 0;

 protected:
  ~CompletionHandler() = default;
};

// The context of one posted operation. `context` comes first so that the
// pointer libfabric hands back is the operation itself, and providers that
// need FI_CONTEXT/FI_CONTEXT2 scratch space find it there.
struct RdmaOp {
  fi_context2 context;
  OpType type = OpType::kSend;
  RdmaWrite write;       // kWrite
  void* buf = nullptr;   // kSend, kRecv
  size_t length = 0;     // kSend, kRecv: posted length
  void* desc = nullptr;  // kSend, kRecv
  fi_addr_t peer = FI_ADDR_UNSPEC;
  size_t received = 0;                   // kRecv: bytes that arrived
  int error = 0;                         // 0, or the positive libfabric error code
  std::string error_message;             // set only when error != 0
  uint64_t user = 0;                     // free for the caller (a GPU index, a page)
  OpCallback callback;                   // the series' way, or...
  CompletionHandler* handler = nullptr;  // ...chapter 17's
  OpState state = OpState::kFree;
  // Every operation not yet given back is on its Network's list, so that
  // recovery can find those the provider still holds.
  RdmaOp* prev = nullptr;
  RdmaOp* next = nullptr;

  bool ok() const { return error == 0; }
};

// A memory registration, closed with its owner. `remote_addr` is what a peer
// puts into its WRITE: the virtual address when the provider wants
// FI_MR_VIRT_ADDR, an offset of 0 otherwise.
class MemoryRegion {
 public:
  MemoryRegion() = default;
  MemoryRegion(FidPtr<fid_mr> mr, uint64_t remote_addr, size_t size, bool dmabuf)
      : mr_(std::move(mr)), remote_addr_(remote_addr), size_(size), dmabuf_(dmabuf) {}
  void* desc() const { return fi_mr_desc(mr_.get()); }
  uint64_t key() const { return fi_mr_key(mr_.get()); }
  uint64_t remote_addr() const { return remote_addr_; }
  size_t size() const { return size_; }
  bool via_dmabuf() const { return dmabuf_; }

 private:
  FidPtr<fid_mr> mr_;
  uint64_t remote_addr_ = 0;
  size_t size_ = 0;
  bool dmabuf_ = false;
};

// Which provider and memory the program runs with.
struct FabricChoice {
  std::string provider;  // "efa", "shm" or "tcp"
  MemoryKind memory = MemoryKind::kHost;
  std::string domain;  // only this domain (e.g. "lo" for tcp); empty: all
};

// The hints we give fi_getinfo: RDM with RMA, remote CQ data, (for CUDA
// memory) FI_HMEM, EFA's memory registration modes, the chapter's threading
// level, and for EFA the `efa` fabric by name: from libfabric 2.1 the
// `efa-direct` fabric comes first with the same domains, and its rules
// (the RMA target must know the initiator; messages no larger than the
// MTU) are not the series'.
FiInfoPtr MakeHints(const FabricChoice& choice, const NetworkOptions& options);

// The fi_info of every NIC the provider offers for those hints, one per
// domain, in the provider's order. Throws UsageError with a one-line
// explanation when there is none.
std::vector<FiInfoPtr> FindNics(const FabricChoice& choice, const NetworkOptions& options = {});

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

// "auto" resolves to "efa" when libfabric finds an EFA device, else "tcp".
std::string ResolveProvider(const std::string& requested);

// Aligned to a cache line: each writer thread owns its NICs, and the
// counters it writes must not share a line with a neighbour's NIC.
class alignas(64) Network {
 public:
  explicit Network(const fi_info& info, const NetworkOptions& options = {});
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  const fi_info& info() const { return *info_; }
  const std::string& name() const { return name_; }
  const std::vector<uint8_t>& address() const { return address_; }
  // Link speed in Gbps as the provider reports it, 0 when unknown.
  double link_gbps() const;

  MemoryRegion Register(const Buffer& buffer);

  // Peers go into the address vector before any operation names them.
  // AddPeer first checks the address against the provider's format (a
  // malformed one would make the provider read past it, and one failed
  // insert leaves tcp;ofi_rxm 1.17's AV refusing every later insert) and
  // throws RuntimeError in one line. A failed insert marks the Network for
  // ResetEndpoint().
  fi_addr_t AddPeer(const std::vector<uint8_t>& address);
  void RemovePeer(fi_addr_t peer);
  // Throws RuntimeError when `address` is not one this provider can insert.
  void CheckPeerAddress(const std::vector<uint8_t>& address) const;

  // The series' posting discipline: the operation joins the NIC's pending
  // queue, and the queue is posted at once, in order, until the provider
  // answers -FI_EAGAIN; the rest waits for the next PollCompletion().
  void PostRecv(void* buf, size_t length, void* desc, OpCallback callback);
  void PostSend(fi_addr_t peer, const void* buf, size_t length, void* desc, OpCallback callback);
  void PostWrite(const RdmaWrite& write, OpCallback callback);
  // Chapter 15: only joins the pending queue; the caller's next
  // PollCompletion() posts it, after reading the completion queue.
  void LazyPostWrite(const RdmaWrite& write, OpCallback callback);
  // Chapter 17: the same, completed through `handler` with op.user = user
  // (no std::function to build; meant for NetworkOptions::op_pool).
  void PostWrite(const RdmaWrite& write, CompletionHandler* handler, uint64_t user);
  void LazyPostWrite(const RdmaWrite& write, CompletionHandler* handler, uint64_t user);

  void OnRemoteWrite(RemoteWriteCallback callback) { on_remote_write_ = std::move(callback); }
  // Runs on the polling thread; an empty callback removes the hook.
  void OnOrphanError(OrphanErrorCallback callback) { on_orphan_error_ = std::move(callback); }

  // Reports operations that failed before the provider took them, reads the
  // completion queue (kCqReadCount entries at a time, until it is empty),
  // runs the callbacks (error completions included, with op.error set),
  // then posts the pending queue. Returns the number of completions
  // handled. A post the provider refuses outright becomes an error
  // completion of that operation, never an exception.
  size_t PollCompletion();
  static constexpr size_t kCqReadCount = 16;  // the series' fi_cq_read size

  // The provider's asynchronous errors (the endpoint's event queue): "" when
  // there are none, else one line. Without a bound EQ the efa fabric
  // abort()s on errors of its own internal operations (efa_base_ep.c).
  // Safe to call from a watching thread.
  std::string TakeEventError();

  const NetworkOptions& options() const { return options_; }
  // A copy of the counters; safe from any thread.
  NetworkCounters counters() const;
  // The endpoint's event queue, for tests that play the provider's part.
  fid_eq* event_queue_for_testing() { return eq_.get(); }

  // Sends and writes still in our queue fail with FI_ECANCELED, reported by
  // the next PollCompletion(). Receives stay queued, and so does the post
  // that closes a batch left open with FI_MORE (chapter 18).
  void CancelQueuedTransmits();
  // Forgets every send and write not yet completed, without calling back:
  // queued ones at once; those the provider holds are detached (their
  // contexts stay allocated until the provider lets go, or the endpoint is
  // reset). Returns how many the provider still holds.
  size_t DetachTransmits();
  // Closes the endpoint, its completion queue and address vector, and
  // opens new ones on the same domain, so registrations stay valid. Every
  // operation is forgotten without a callback (posted receives too: post
  // them again) and every peer is gone. With `keep_address` the endpoint
  // takes its old address again (fi_setname) and RuntimeError is thrown
  // when the provider cannot.
  void ResetEndpoint(bool keep_address);
  // The same, taking `address` (a restarted server takes back the address
  // its clients know). Throws RuntimeError when the provider cannot.
  void ReopenAt(const std::vector<uint8_t>& address);
  // Closes the endpoint, completion queue and address vector now, before
  // memory registered with them is freed; the domain stays for the
  // registrations still open. Nothing may be posted afterwards.
  void CloseEndpoint();
  // True when the provider still holds detached operations or the address
  // vector refused an insert: only ResetEndpoint() makes the NIC whole.
  bool needs_reset() const { return detached_ > 0 || av_damaged_; }
  size_t detached() const { return detached_; }

  // Sends and writes completed so far, errors included (receives do not
  // count, so a flood of messages cannot hide a transfer that stopped), and
  // error completions that named no operation. Safe to read from any
  // thread: a watchdog's view of progress.
  uint64_t transmit_completions() const {
    return transmit_completions_.load(std::memory_order_relaxed);
  }
  uint64_t orphan_errors() const { return orphan_errors_.load(std::memory_order_relaxed); }
  // Calls into the provider (posts and polls) begun and finished: a thread
  // inside one has started != finished, and a watchdog that sees the pair
  // frozen so knows it is stuck there.
  // The thread that made the latest provider call (a kernel thread id).
  int provider_caller() const { return caller_tid_.load(std::memory_order_relaxed); }
  uint64_t provider_calls_started() const { return calls_started_.load(std::memory_order_relaxed); }
  uint64_t provider_calls_finished() const {
    return calls_finished_.load(std::memory_order_relaxed);
  }

  // Operations posted and not yet completed (pending ones included).
  size_t outstanding() const { return outstanding_; }
  // Sends and writes the provider holds: what the transmit queue holds.
  size_t posted_transmits() const { return posted_transmits_; }
  // Starts the peak counters (longest_write_run) afresh, for a new transfer.
  // Call it from the thread that uses the Network, or before that starts.
  void ResetPeaks();
  // Operations waiting in our queue for the provider to take them.
  size_t pending() const { return pending_.size(); }
  // Sends and writes not yet completed: what must drain before the peer's
  // address may be removed. (Posted receives wait for new peers and stay.)
  size_t outstanding_transmits() const { return outstanding_ - outstanding_recvs_; }

 private:
  // Closes the endpoint and opens a new one (at `address` when given).
  void Reopen(const std::vector<uint8_t>* address);
  void OpenEndpoint(const std::vector<uint8_t>* name);
  RdmaOp* NewOp(OpType type);
  void FreeOp(RdmaOp* op);
  void Link(RdmaOp* op);
  void Unlink(RdmaOp* op);
  // The op joins the pending queue (and, unless lazy, the queue is posted).
  void Enqueue(RdmaOp* op, bool lazy);
  // Posts the pending queue in order until the provider refuses one.
  void ProgressPendingOps();
  // Hands `op` to the provider; -FI_EAGAIN or 0. A hard error marks the op
  // failed and queues it for the next poll (and counts as taken).
  ssize_t Submit(RdmaOp* op, uint64_t more_flag);
  void ReportFailed();
  void Complete(RdmaOp* op);
  void HandleCompletion(RdmaOp* op, const fi_cq_data_entry& entry);
  void HandleErrorCompletion();
  void CountTransmit(const RdmaOp& op) { transmits_done_ += op.type != OpType::kRecv; }
  // One writer (the thread using the Network), readers anywhere: a relaxed
  // load and store compile to a plain add and keep the reads well-defined.
  static void Bump(std::atomic<uint64_t>& counter, uint64_t by = 1) {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  // The NetworkCounters. Built with -DTUTORIAL_NO_COUNTERS they vanish, so
  // their own cost can be measured (docs/README.md, "Counters").
  static void Count(std::atomic<uint64_t>& counter, uint64_t by = 1) {
#ifndef TUTORIAL_NO_COUNTERS
    Bump(counter, by);
#else
    (void)counter;
    (void)by;
#endif
  }
  // Brackets one call into the provider: the watchdog sees a thread inside
  // one, and the counters get the time it took.
  class ProviderCall {
   public:
    explicit ProviderCall(Network& net);
    ~ProviderCall();

   private:
    Network& net_;
    uint64_t start_;
  };

  FiInfoPtr info_;
  NetworkOptions options_;
  std::string name_;
  FidPtr<fid_fabric> fabric_;
  FidPtr<fid_domain> domain_;
  FidPtr<fid_eq> eq_;
  FidPtr<fid_cq> cq_;
  FidPtr<fid_av> av_;
  FidPtr<fid_ep> ep_;
  std::vector<uint8_t> address_;
  bool virt_addr_ = false;
  bool hmem_ = false;
  uint64_t next_mr_key_ = 1;

  // Chapter 17: operation contexts live in chunks that never move, reused
  // through a free list: no allocation per operation once the pool is warm.
  std::vector<std::unique_ptr<RdmaOp[]>> op_chunks_;
  std::vector<RdmaOp*> free_ops_;
  RdmaOp* live_ = nullptr;  // every op not yet given back (Link/Unlink)
  std::deque<RdmaOp*> pending_;
  std::deque<RdmaOp*> failed_;  // failed before the provider took them
  size_t tx_depth_ = 0;         // the provider's transmit queue size
  size_t outstanding_ = 0;
  size_t outstanding_recvs_ = 0;
  size_t posted_transmits_ = 0;
  bool batch_open_ = false;  // the last accepted post carried FI_MORE
  size_t detached_ = 0;
  bool av_damaged_ = false;
  RemoteWriteCallback on_remote_write_;
  OrphanErrorCallback on_orphan_error_;
  uint64_t transmits_done_ = 0;  // published as transmit_completions_ per poll
  std::atomic<uint64_t> transmit_completions_{0};
  std::atomic<uint64_t> orphan_errors_{0};
  std::atomic<uint64_t> calls_started_{0};
  std::atomic<uint64_t> calls_finished_{0};
  std::atomic<int> caller_tid_{0};
  struct {
    std::atomic<uint64_t> writes{0}, post_calls{0}, doorbells{0}, eagain{0}, cq_reads{0},
        cq_empty_reads{0}, cq_entries{0}, provider_ticks{0}, op_allocations{0},
        longest_write_run{0};
  } counters_;
  uint64_t writes_since_cq_read_ = 0;
};

}  // namespace tutorial
