// One NIC as libfabric sees it: fabric, domain, completion queue, address
// vector and one reliable-datagram (RDM) endpoint, with the series'
// bookkeeping around them: one operation context per post, a queue for
// posts the provider refused with -FI_EAGAIN, and completion polling.
//
// A Network is used by one thread at a time; chapters from 11 on give each
// thread its own Networks. Its state is public, as in the series' struct
// Network, so that what watches it from outside (harness/) needs no back
// door; chapters use the functions.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/device_rdma.h"

namespace tutorial {

class Network;
struct RdmaOp;

// Closes any libfabric object through its embedded `struct fid`.
template <typename T>
struct FidCloser {
  void operator()(T* object) const {
    if (object != nullptr) fi_close(&object->fid);
  }
};

template <typename T>
using FidPtr = std::unique_ptr<T, FidCloser<T>>;

// Owns a list returned by fi_getinfo (or one fi_dupinfo'ed entry).
struct FiInfoFree {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using FiInfoPtr = std::unique_ptr<fi_info, FiInfoFree>;

// A libfabric call failed: one line and exit code 1, as any error while running.
class FabricError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws FabricError when `ret` is an error code, in fabtests' form:
// "fi_cq_read(): common/network.cc:412, ret=-5 (Input/output error)".
inline void CheckFabric(long ret, const char* call, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  if (ret < 0) {
    throw FabricError(std::string(call) + "(): " + file + ":" + std::to_string(line) + ", ret=" +
                      std::to_string(ret) + " (" + fi_strerror(static_cast<int>(-ret)) + ")");
  }
}

// A chapter's change to the hints the NICs are found with (the
// threading level, for one); empty: the series' hints.
using EditHints = std::function<void(fi_info& hints)>;

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
  bool posted = false;  // the provider holds it
  // On the Network's list of ops not yet completed (in_flight).
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
// memory) FI_HMEM, EFA's memory registration modes, the series' threading
// level (FI_THREAD_SAFE) unless `edit` changes it, and for EFA the `efa` fabric by name: from
// libfabric 2.1 the `efa-direct` fabric comes first with the same domains, and its rules (the RMA
// target must know the initiator; messages no larger than the MTU) are not the series'.
FiInfoPtr MakeHints(const FabricChoice& choice, const EditHints& edit = {});

// The fi_info of every NIC the provider offers for those hints, one per
// domain, in the provider's order. Throws UsageError with a one-line
// explanation when there is none.
std::vector<FiInfoPtr> FindNics(const FabricChoice& choice, const EditHints& edit = {});

// "auto" resolves to "efa" when libfabric finds an EFA device, else "tcp".
std::string ResolveProvider(const std::string& requested);

// A NIC's link speed in Gbps as the provider reports it, 0 when unknown.
double LinkGbps(const fi_info& info);

// The provider calls a Network makes, as its hooks tell them apart.
enum class ProviderCall : uint8_t { kRecv, kSend, kWrite, kCqRead, kCqReadErr };
// What watches a Network from outside (harness/: metering, watchdogs,
// recovery) attaches here; a Network works alone without it.
class NetworkHooks {
 public:
  virtual ~NetworkHooks() = default;
  virtual void EnterProvider(ProviderCall call) = 0;  // around every provider call
  virtual void LeaveProvider(ProviderCall call, ssize_t ret, uint64_t flags) = 0;
  virtual void HeldBack() = 0;  // a post held back: the provider's queue is full
  virtual void Queued(const RdmaOp& op, bool allocated) = 0;
  virtual bool Deliver(RdmaOp& op) = 0;  // false: nobody waits for it
  virtual void ErrorWithoutOp(Network& net, const std::string& error) = 0;
  // Throws to refuse an address before it goes into the address vector.
  virtual void CheckPeerAddress(const Network& net, const std::vector<uint8_t>& address) = 0;
  virtual void AddressVectorRefused(Network& net) = 0;
};

// Aligned to a cache line: each writer thread owns its NICs, and what it
// writes must not share a line with a neighbour's NIC.
class alignas(64) Network {
 public:
  explicit Network(const fi_info& info);
  virtual ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  const fi_info& info() const { return *info_; }
  const std::string& name() const { return name_; }
  const std::vector<uint8_t>& address() const { return address_; }
  const DeviceRdma& device_rdma() const { return device_rdma_; }

  MemoryRegion Register(const Buffer& buffer);

  // Peers go into the address vector before any operation names them.
  // Throws FabricError in one line when the address is refused (the hooks
  // check it first: a malformed one can crash a provider).
  fi_addr_t AddPeer(const std::vector<uint8_t>& address);
  virtual void RemovePeer(fi_addr_t peer);

  // The series' posting discipline: the operation joins the NIC's pending
  // queue, and the queue is posted at once, in order, until the provider
  // answers -FI_EAGAIN; the rest waits for the next PollCompletion().
  void PostRecv(void* buf, size_t length, void* desc, OpCallback callback);
  void PostSend(fi_addr_t peer, const void* buf, size_t length, void* desc, OpCallback callback);
  void PostWrite(const RdmaWrite& write, OpCallback callback);

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
  size_t pending() const { return pending_ops.size(); }
  // Sends and writes not yet completed: what must drain before the peer's
  // address may be removed. (Posted receives wait for new peers and stay.)
  size_t outstanding_transmits() const;

  // Closes the endpoint, its completion queue and address vector, and
  // gives back every operation without calling back; OpenEndpoint() opens
  // new ones on the same domain (at `name`, when given), so registrations
  // stay valid.
  virtual void CloseEndpoint();
  void OpenEndpoint(const std::vector<uint8_t>* name);
  // After CloseEndpoint() and once every registration on it is closed:
  // a new domain, for a provider whose closed endpoints leave work behind
  // in their domain (harness/recovery.h). OpenEndpoint() follows.
  void ReopenDomain();
  fid_eq* event_queue() const { return eq_.get(); }
  // A new operation context, on the list of those not yet completed; and
  // the context given back (the series: new and delete).
  RdmaOp* NewOp(OpType type, OpCallback callback);
  void FreeOp(RdmaOp* op);

  // The series' queue; ours of posts that failed, for the next poll to report.
  std::deque<RdmaOp*> pending_ops;
  std::deque<RdmaOp*> failed_ops;
  RdmaOp* in_flight = nullptr;  // every operation not yet given back
  size_t posted_transmits = 0;  // sends and writes the provider holds
  NetworkHooks* hooks = nullptr;

 protected:
  static constexpr size_t kCqReadCount = 16;  // the series' fi_cq_read size

  // The series' ways (a later chapter may bring its own): each context
  // allocated, the queue posted until the provider refuses, the callback.
  virtual RdmaOp* AllocateOp(bool& from_heap);
  virtual void ReleaseOp(RdmaOp* op);
  virtual void ProgressPendingOps();
  virtual void Complete(RdmaOp* op);
  // Hands `op` to the provider: 0, -FI_EAGAIN, or an error (op on failed_ops).
  ssize_t Post(RdmaOp* op, uint64_t flags);
  void Finish(RdmaOp* op);  // calls back and gives `op` back
  // For a subclass that reads completions the series' way cannot (entries
  // whose context is not an RdmaOp).
  fid_ep* endpoint() const { return ep_.get(); }
  fid_cq* completion_queue() const { return cq_.get(); }

  // The provider's transmit queue depth (tx_attr->size), never exceeded: efa
  // refuses beyond it itself, tcp would keep a stopped client's every WRITE.
  size_t tx_depth_ = 0;

 private:
  void HandleErrorCompletion();

  FiInfoPtr info_;
  std::string name_;
  FidPtr<fid_fabric> fabric_;
  FidPtr<fid_domain> domain_;
  // Bound to the endpoint: without an EQ the efa fabric abort()s on errors
  // of its own internal operations (efa_base_ep.c).
  FidPtr<fid_eq> eq_;
  FidPtr<fid_cq> cq_;
  FidPtr<fid_av> av_;
  FidPtr<fid_ep> ep_;
  std::vector<uint8_t> address_;
  bool virt_addr_ = false;
  bool hmem_ = false;
  DeviceRdma device_rdma_;
  uint64_t next_mr_key_ = 1;
  RemoteWriteCallback on_remote_write_;
};

// The NICs that belong to one GPU, used round-robin: each WRITE goes to the
// next NIC of the group, so all of them stay busy.
class NetworkGroup {
 public:
  explicit NetworkGroup(std::vector<Network*> nets) : nets(std::move(nets)) {}

  // Index of the NIC for the next operation, cycling through the group.
  size_t GetNext() {
    size_t index = next_;
    if (++next_ == nets.size()) next_ = 0;
    return index;
  }

  // True while one NIC of the group has `max_pending` operations waiting in
  // its pending queue: posting more would grow our queue, not the NIC's.
  bool Backlogged(size_t max_pending) const {
    for (const Network* net : nets) {
      if (net->pending() >= max_pending) return true;
    }
    return false;
  }

  std::vector<Network*> nets;

 private:
  size_t next_ = 0;
};

// What an efa endpoint said about GPUDirect and its WRITEs when it opened
// (common/device_rdma.h); not efa: nothing known.
inline const DeviceRdma& DeviceRdmaOf(const Network& net) { return net.device_rdma(); }

}  // namespace tutorial
