// One NIC as libfabric sees it: fabric, domain, completion queue, address
// vector and one reliable-datagram (RDM) endpoint, plus the bookkeeping that
// every chapter needs around them: operation contexts, a queue for posts the
// provider refused with -FI_EAGAIN, and completion polling.
//
// A Network is used by one thread at a time (the domain is opened with
// FI_THREAD_DOMAIN); chapters from 11 on give each thread its own Networks.
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
// A third needs no code, only peers in other processes, as ours are: shm
// keeps a closed endpoint's name in a process-wide list (1.17 to 2.6), so a
// peer in the same process that inserts a reset endpoint's unchanged address
// maps the old, unmapped region.
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
  size_t received = 0;        // kRecv: bytes that arrived
  int error = 0;              // 0, or the positive libfabric error code
  std::string error_message;  // set only when error != 0
  uint64_t user = 0;          // free for the caller (a GPU index, a page)
  OpCallback callback;
  OpState state = OpState::kFree;

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

// The fi_info of every NIC the provider offers for RDM with RMA, remote CQ
// data and (for CUDA memory) FI_HMEM, one per domain, in the provider's order.
// Throws UsageError with a one-line explanation when there is none.
std::vector<FiInfoPtr> FindNics(const FabricChoice& choice);

// "auto" resolves to "efa" when libfabric finds an EFA device, else "tcp".
std::string ResolveProvider(const std::string& requested);

class Network {
 public:
  explicit Network(const fi_info& info);
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

  void PostRecv(void* buf, size_t length, void* desc, OpCallback callback);
  void PostSend(fi_addr_t peer, const void* buf, size_t length, void* desc, OpCallback callback);
  // Posts now; if the provider is busy (-FI_EAGAIN) the write waits in the
  // pending queue and PollCompletion() posts it later, in order.
  void PostWrite(const RdmaWrite& write, OpCallback callback);
  // Only queues the write; PollCompletion() submits everything queued in one
  // go, with FI_MORE on all but the last (chapter 15's idea).
  void QueueWrite(const RdmaWrite& write, OpCallback callback);

  void OnRemoteWrite(RemoteWriteCallback callback) { on_remote_write_ = std::move(callback); }
  // Runs on the polling thread; an empty callback removes the hook.
  void OnOrphanError(OrphanErrorCallback callback) { on_orphan_error_ = std::move(callback); }

  // Reports operations that failed before the provider took them, reads the
  // completion queue, runs the callbacks (error completions included, with
  // op.error set), then retries pending posts. Returns the number of
  // completions handled. A post the provider refuses outright becomes an
  // error completion of that operation, never an exception.
  size_t PollCompletion();

  // Sends and writes still in our queue fail with FI_ECANCELED, reported by
  // the next PollCompletion(). Receives stay queued.
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
  uint64_t provider_calls_started() const { return calls_started_.load(std::memory_order_relaxed); }
  uint64_t provider_calls_finished() const {
    return calls_finished_.load(std::memory_order_relaxed);
  }

  // Operations posted and not yet completed (pending ones included).
  size_t outstanding() const { return outstanding_; }
  // Operations waiting in our queue for the provider to take them.
  size_t pending() const { return pending_.size(); }
  // Sends and writes not yet completed: what must drain before the peer's
  // address may be removed. (Posted receives wait for new peers and stay.)
  size_t outstanding_transmits() const { return outstanding_ - outstanding_recvs_; }

 private:
  // Closes the endpoint and opens a new one (at `address` when given).
  void Reopen(const std::vector<uint8_t>* address);
  void OpenEndpoint(const std::vector<uint8_t>* name);
  RdmaOp* NewOp(OpType type, OpCallback&& callback);
  void FreeOp(RdmaOp* op);
  // Queues `op`, or hands it to the provider when nothing waits before it.
  void Post(RdmaOp* op);
  // Hands `op` to the provider; false when it answered -FI_EAGAIN. A hard
  // error marks the op failed and queues it for the next poll.
  bool Submit(RdmaOp* op, bool more);
  void SubmitPending();
  void ReportFailed();
  void HandleCompletion(RdmaOp* op, const fi_cq_data_entry& entry);
  void HandleErrorCompletion();
  void CountTransmit(const RdmaOp& op) { transmits_done_ += op.type != OpType::kRecv; }
  // Brackets a call into the provider for the watchdog.
  class ProviderCall {
   public:
    explicit ProviderCall(Network& net) : net_(net) { Bump(net_.calls_started_); }
    ~ProviderCall() { Bump(net_.calls_finished_); }

   private:
    static void Bump(std::atomic<uint64_t>& counter) {
      // One writer (the thread using the Network): a plain store suffices.
      counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    Network& net_;
  };

  FiInfoPtr info_;
  std::string name_;
  FidPtr<fid_fabric> fabric_;
  FidPtr<fid_domain> domain_;
  FidPtr<fid_cq> cq_;
  FidPtr<fid_av> av_;
  FidPtr<fid_ep> ep_;
  std::vector<uint8_t> address_;
  bool virt_addr_ = false;
  bool hmem_ = false;
  uint64_t next_mr_key_ = 1;

  // Operation contexts live in chunks that never move, reused through a
  // free list: no allocation per operation once the pool is warm.
  std::vector<std::unique_ptr<RdmaOp[]>> op_chunks_;
  std::vector<RdmaOp*> free_ops_;
  std::deque<RdmaOp*> pending_;
  std::deque<RdmaOp*> failed_;  // failed before the provider took them
  size_t outstanding_ = 0;
  size_t outstanding_recvs_ = 0;
  size_t detached_ = 0;
  bool av_damaged_ = false;
  RemoteWriteCallback on_remote_write_;
  OrphanErrorCallback on_orphan_error_;
  uint64_t transmits_done_ = 0;  // published as transmit_completions_ per poll
  std::atomic<uint64_t> transmit_completions_{0};
  std::atomic<uint64_t> orphan_errors_{0};
  std::atomic<uint64_t> calls_started_{0};
  std::atomic<uint64_t> calls_finished_{0};
};

}  // namespace tutorial
