// One NIC as libfabric sees it: fabric, domain, completion queue, address
// vector and one reliable-datagram (RDM) endpoint, plus the bookkeeping that
// every chapter needs around them: operation contexts, a queue for posts the
// provider refused with -FI_EAGAIN, and completion polling.
//
// A Network is used by one thread at a time (the domain is opened with
// FI_THREAD_DOMAIN); chapters from 11 on give each thread its own Networks.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

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

// The context of one posted operation. `context` comes first so that the
// pointer libfabric hands back is the operation itself, and providers that
// need FI_CONTEXT/FI_CONTEXT2 scratch space find it there.
struct RdmaOp {
  fi_context2 context;
  OpType type = OpType::kSend;
  RdmaWrite write;              // kWrite
  void* buf = nullptr;          // kSend, kRecv
  size_t length = 0;            // kSend, kRecv: posted length
  void* desc = nullptr;         // kSend, kRecv
  fi_addr_t peer = FI_ADDR_UNSPEC;
  size_t received = 0;          // kRecv: bytes that arrived
  int error = 0;                // 0, or the positive libfabric error code
  std::string error_message;    // set only when error != 0
  uint64_t user = 0;            // free for the caller (a GPU index, a page)
  OpCallback callback;

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
  std::string domain;    // only this domain (e.g. "lo" for tcp); empty: all
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
  fi_addr_t AddPeer(const std::vector<uint8_t>& address);
  void RemovePeer(fi_addr_t peer);

  void PostRecv(void* buf, size_t length, void* desc, OpCallback callback);
  void PostSend(fi_addr_t peer, const void* buf, size_t length, void* desc, OpCallback callback);
  // Posts now; if the provider is busy (-FI_EAGAIN) the write waits in the
  // pending queue and PollCompletion() posts it later, in order.
  void PostWrite(const RdmaWrite& write, OpCallback callback);
  // Only queues the write; PollCompletion() submits everything queued in one
  // go, with FI_MORE on all but the last (chapter 15's idea).
  void QueueWrite(const RdmaWrite& write, OpCallback callback);

  void OnRemoteWrite(RemoteWriteCallback callback) { on_remote_write_ = std::move(callback); }

  // Reads the completion queue, runs the callbacks (error completions
  // included, with op.error set), then retries pending posts. Returns the
  // number of completions handled.
  size_t PollCompletion();

  // Operations posted and not yet completed (pending ones included).
  size_t outstanding() const { return outstanding_; }
  // Operations waiting in our queue for the provider to take them.
  size_t pending() const { return pending_.size(); }
  // Sends and writes not yet completed: what must drain before the peer's
  // address may be removed. (Posted receives wait for new peers and stay.)
  size_t outstanding_transmits() const { return outstanding_ - outstanding_recvs_; }

 private:
  RdmaOp* NewOp(OpType type, OpCallback&& callback);
  void FreeOp(RdmaOp* op);
  // Tries to hand `op` to the provider; false when it answered -FI_EAGAIN.
  bool Submit(RdmaOp* op, bool more);
  void SubmitPending();
  void HandleCompletion(RdmaOp* op, const fi_cq_data_entry& entry);
  void HandleErrorCompletion();

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
  size_t outstanding_ = 0;
  size_t outstanding_recvs_ = 0;
  RemoteWriteCallback on_remote_write_;
};

}  // namespace tutorial
