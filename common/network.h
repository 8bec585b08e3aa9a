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
// What a Network does when a peer dies lives in common/recovery_nic.h (a
// friend that reaches into it); why, provider by provider, in
// docs/provider-failures.md.
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
#include "common/call_meter.h"
#include "common/device_rdma.h"
#include "common/fabric_handles.h"
#include "common/post_queue.h"

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
// What efa does with hints that ask for FI_REMOTE_COMM without
// FI_LOCAL_COMM (libfabric 1.22 to 2.6: efa_user_info.c clears FI_LOCAL_COMM
// in the fi_info; efa_domain.c in 2.1, efa_shm.c in 2.6, then open no shm
// provider inside efa): no shm domain, endpoint, address vector or CQ per
// NIC, no copy of every registration into shm (efa_rdm_mr.c; for CUDA
// memory an IPC handle each), and no shm poll inside every fi_cq_read
// (efa_rdm_cq.c). The price: a peer on the same host is reached through
// the NIC, which is what a tutorial measuring NICs wants (the series' two
// p5s never share a host). docs/running-on-p5.md says so.
constexpr uint64_t kEfaCommCaps = FI_REMOTE_COMM;
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

// "auto" resolves to "efa" when libfabric finds an EFA device, else "tcp".
std::string ResolveProvider(const std::string& requested);

// A NIC's link speed in Gbps as the provider reports it, 0 when unknown.
double LinkGbps(const fi_info& info);

class Recovery;  // common/recovery_nic.h

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
  const NetworkOptions& options() const { return options_; }

  MemoryRegion Register(const Buffer& buffer);

  // Peers go into the address vector before any operation names them.
  // The address is checked first (Recovery::CheckPeerAddress): a malformed
  // one would make the provider read past it or poison its AV. Throws
  // RuntimeError in one line.
  fi_addr_t AddPeer(const std::vector<uint8_t>& address);
  void RemovePeer(fi_addr_t peer);

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

  // Called for every remote write into our memory that carried CQ data.
  void OnRemoteWrite(RemoteWriteCallback callback) { on_remote_write_ = std::move(callback); }

  // Reports operations that failed before the provider took them, reads the
  // completion queue (kCqReadCount entries at a time, until it is empty),
  // runs the callbacks (error completions included, with op.error set),
  // then posts the pending queue. Returns the number of completions
  // handled. A post the provider refuses outright becomes an error
  // completion of that operation, never an exception.
  size_t PollCompletion();

  // Operations waiting in our queue for the provider to take them: the
  // writer's in-flight window is measured on it (NetworkGroup).
  size_t pending() const { return pending_.size(); }
  // Sends and writes not yet completed: what must drain before the peer's
  // address may be removed. (Posted receives wait for new peers and stay.)
  size_t outstanding_transmits() const { return outstanding_ - outstanding_recvs_; }

  // Instrumentation: every provider call goes through it (counters,
  // watchdogs). Not part of the path a chapter reads.
  CallMeter& meter() { return meter_; }

 private:
  friend class Recovery;
  friend const DeviceRdma& DeviceRdmaOf(const Network& net);
  static constexpr size_t kCqReadCount = 16;  // the series' fi_cq_read size

  void OpenEndpoint(const std::vector<uint8_t>* name);
  // Closes the endpoint, CQ and AV and gives back every operation.
  void CloseEndpoint();
  RdmaOp* NewOp(OpType type);
  void FreeOp(RdmaOp* op);
  RdmaOp* TakePooledOp();  // chapter 17
  void ReturnPooledOp(RdmaOp* op);
  void Link(RdmaOp* op);
  void Unlink(RdmaOp* op);
  // The op joins the pending queue (and, unless lazy, the queue is posted).
  void Enqueue(RdmaOp* op, bool lazy);
  // Posts the pending queue in order until the provider refuses one.
  void ProgressPendingOps();
  // Hands `op` to the provider: 0, -FI_EAGAIN, or the error of a post that
  // failed for good, which marks the op failed and queues it for the next
  // poll.
  ssize_t Submit(RdmaOp* op, uint64_t more_flag);
  ssize_t PostToProvider(RdmaOp* op, uint64_t more_flag);
  void ReportFailed();
  void Complete(RdmaOp* op);
  void HandleCompletion(RdmaOp* op, const fi_cq_data_entry& entry);
  void HandleErrorCompletion();

  FiInfoPtr info_;
  NetworkOptions options_;
  std::string name_;
  FidPtr<fid_fabric> fabric_;
  FidPtr<fid_domain> domain_;
  // Bound to the endpoint: without an EQ the efa fabric abort()s on errors
  // of its own internal operations (efa_base_ep.c). Recovery reads it.
  FidPtr<fid_eq> eq_;
  FidPtr<fid_cq> cq_;
  FidPtr<fid_av> av_;
  FidPtr<fid_ep> ep_;
  std::vector<uint8_t> address_;
  bool virt_addr_ = false;
  bool hmem_ = false;
  DeviceRdma device_rdma_;
  uint64_t next_mr_key_ = 1;

  // Chapter 17: operation contexts live in chunks that never move, reused
  // through a free list: no allocation per operation once the pool is warm.
  std::vector<std::unique_ptr<RdmaOp[]>> op_chunks_;
  std::vector<RdmaOp*> free_ops_;
  RdmaOp* live_ = nullptr;  // every op not yet given back (Link/Unlink)
  std::deque<RdmaOp*> pending_;
  std::deque<RdmaOp*> failed_;  // failed before the provider took them
  // The provider's transmit queue depth (tx_attr->size). Submit hands it no
  // more transmits than that at once: efa answers -FI_EAGAIN there itself
  // (efa_rdm_ope.c: efa_outstanding_tx_ops == efa_max_outstanding_tx_ops,
  // set from tx_attr->size in efa_rdm_ep_fiops.c), but tcp takes every post
  // and keeps an entry for each until it completes, so a client that stops
  // reading would hold a whole transfer's WRITEs there. Transmits recovery
  // detached wait for nobody and do not count.
  size_t tx_depth_ = 0;
  size_t outstanding_ = 0;
  size_t outstanding_recvs_ = 0;
  size_t posted_transmits_ = 0;
  bool batch_open_ = false;         // the last accepted post carried FI_MORE
  ConfirmedPeers confirmed_peers_;  // may receive FI_MORE batches (chapter 18)
  RemoteWriteCallback on_remote_write_;

  // Recovery's state (common/recovery_nic.h): the hook for error
  // completions that name no operation, operations detached from their
  // callers, an AV that refused an insert, and transmits completed (the
  // transfer watch's view of progress: one writer, readers anywhere).
  OrphanErrorCallback on_orphan_error_;
  size_t detached_ = 0;
  bool av_damaged_ = false;
  bool reset_wanted_ = false;    // its event queue reported an error
  uint64_t transmits_done_ = 0;  // published as transmit_completions_ per poll
  std::atomic<uint64_t> transmit_completions_{0};

  CallMeter meter_;
};

// What an efa endpoint said about GPUDirect and its WRITEs when it opened
// (common/device_rdma.h); not efa: nothing known.
inline const DeviceRdma& DeviceRdmaOf(const Network& net) { return net.device_rdma_; }

}  // namespace tutorial
