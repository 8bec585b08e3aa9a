#include "common/network.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <utility>

#include "common/device_rdma.h"
#include "common/errors.h"
#include "common/setup_hints.h"

namespace tutorial {

uint32_t RequestedApiVersion() {
  return ApiVersionFor(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), fi_version());
}

namespace {

// libfabric 1.20 added dma-buf registration; older headers lack the types.
#if defined(FI_MR_DMABUF)
constexpr bool kHaveDmabuf = true;
#else
constexpr bool kHaveDmabuf = false;
#endif

// Closes a libfabric object now and says so when the provider refuses: a
// close out of order (a domain with registrations still open) answers
// -FI_EBUSY.
template <typename T>
void CloseNow(FidPtr<T>& object, const std::string& nic, const char* what) {
  T* raw = object.release();
  if (raw == nullptr) return;
  int ret = fi_close(&raw->fid);
  if (ret != 0) {
    std::fprintf(stderr, "warning: fi_close(%s) of %s failed: %s\n", what, nic.c_str(),
                 fi_strerror(-ret));
  }
}

// Where the application picks the keys (shm, tcp), the first is random, so
// that a peer cannot guess one: over tcp a key is all that keeps a peer
// that knows our address out of our registered memory (shm's writes go
// through process_vm_writev and check no key: the kernel's same-user rule
// guards it). Within the provider's key size.
uint64_t FirstKey(const fi_info& info) {
  std::random_device random;
  uint64_t key = (uint64_t{random()} << 32) ^ random();
  size_t bytes = info.domain_attr->mr_key_size;
  if (bytes > 0 && bytes < sizeof(key)) key &= (uint64_t{1} << (8 * bytes)) - 1;
  // Leaves room to count up without wrapping to the provider's "no key".
  return (key >> 1) + 1;
}

}  // namespace

FiInfoPtr MakeHints(const FabricChoice& choice, const EditHints& edit) {
  FiInfoPtr hints(fi_allocinfo());
  if (!hints) throw FabricError("fi_allocinfo failed");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_WRITE;
  // We supply per-operation scratch space, so providers that need it
  // (efa-direct wants FI_CONTEXT2) are welcome.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  if (choice.memory == MemoryKind::kCuda) {
    hints->caps |= FI_HMEM;
    hints->domain_attr->mr_mode |= FI_MR_HMEM;
  }
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->tx_attr->op_flags = FI_COMPLETION;
  hints->fabric_attr->prov_name = strdup(choice.provider.c_str());
  if (choice.provider == "efa") {
    hints->fabric_attr->name = strdup("efa");
    // Peers on other hosts only: asking for FI_REMOTE_COMM without
    // FI_LOCAL_COMM keeps efa from opening shm inside itself (see
    // kEfaCommCaps in network.h).
    hints->caps |= kEfaCommCaps;
  }
  if (edit) edit(*hints);
  return hints;
}

std::string ResolveProvider(const std::string& requested) {
  if (requested != "auto") return requested;
  FabricChoice efa{"efa", MemoryKind::kHost, ""};
  fi_info* found = nullptr;
  FiInfoPtr hints = MakeHints(efa);
  int ret = fi_getinfo(RequestedApiVersion(), nullptr, nullptr, 0, hints.get(), &found);
  FiInfoPtr owned(found);
  return (ret == 0 && found != nullptr) ? "efa" : "tcp";
}

std::vector<FiInfoPtr> FindNics(const FabricChoice& choice, const EditHints& edit) {
  FiInfoPtr hints = MakeHints(choice, edit);
  fi_info* list = nullptr;
  int ret = fi_getinfo(RequestedApiVersion(), nullptr, nullptr, 0, hints.get(), &list);
  FiInfoPtr owned_list(list);
  if (ret != 0 || list == nullptr) {
    if (choice.memory == MemoryKind::kCuda) {
      // Ask again without FI_HMEM to tell "no provider" from "no GPU memory".
      FabricChoice host = choice;
      host.memory = MemoryKind::kHost;
      FiInfoPtr host_hints = MakeHints(host, edit);
      fi_info* host_list = nullptr;
      if (fi_getinfo(RequestedApiVersion(), nullptr, nullptr, 0, host_hints.get(), &host_list) ==
              0 &&
          host_list != nullptr) {
        fi_freeinfo(host_list);
        uint32_t api = RequestedApiVersion();
        if (choice.provider == "efa" && api < FI_VERSION(1, 18)) {
          throw UsageError(
              "provider 'efa' offers FI_HMEM (GPU memory) only to API 1.18 or newer; "
              "this binary asks for " +
              std::to_string(FI_MAJOR(api)) + "." + std::to_string(FI_MINOR(api)) +
              " (rebuild against newer libfabric headers, e.g. "
              "LIBFABRIC_PREFIX=/opt/amazon/efa)");
        }
        ThrowNoGpuMemory(choice.provider);
      }
    }
    throw UsageError("provider '" + choice.provider + "' is not available (fi_getinfo: " +
                     fi_strerror(ret < 0 ? -ret : FI_ENODATA) + "); try --provider shm or tcp");
  }

  std::vector<FiInfoPtr> nics;
  std::set<std::string> seen_domains;
  for (fi_info* info = list; info != nullptr; info = info->next) {
    std::string domain = info->domain_attr->name ? info->domain_attr->name : "";
    if (!choice.domain.empty() && domain != choice.domain) continue;
    // tcp lists IPv4 and IPv6 per interface; one endpoint per domain is enough.
    if (!seen_domains.insert(domain).second) continue;
    nics.emplace_back(fi_dupinfo(info));
  }
  if (choice.domain.empty()) WarnIfP5LacksNics(choice.provider, nics.size());
  if (nics.empty()) {
    std::string domains;
    for (fi_info* info = list; info != nullptr; info = info->next) {
      std::string domain = info->domain_attr->name ? info->domain_attr->name : "";
      if (domains.find(domain) == std::string::npos)
        domains += (domains.empty() ? "" : ", ") + domain;
    }
    throw UsageError("provider '" + choice.provider + "' has no domain '" + choice.domain +
                     "' (it has: " + domains + ")");
  }
  return nics;
}

Network::Network(const fi_info& info) : info_(fi_dupinfo(&info)) {
  name_ = info_->domain_attr->name ? info_->domain_attr->name : "?";
  tx_depth_ = info_->tx_attr != nullptr && info_->tx_attr->size > 0 ? info_->tx_attr->size : 1;
  virt_addr_ = (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
  hmem_ = (info_->caps & FI_HMEM) != 0;
  next_mr_key_ = FirstKey(*info_);

  fid_fabric* fabric = nullptr;
  CheckFabric(fi_fabric(info_->fabric_attr, &fabric, nullptr), "fi_fabric");
  fabric_.reset(fabric);

  fid_domain* domain = nullptr;
  CheckFabric(fi_domain(fabric_.get(), info_.get(), &domain, nullptr), "fi_domain");
  domain_.reset(domain);

  fi_eq_attr eq_attr{};
  eq_attr.wait_obj = FI_WAIT_NONE;
  fid_eq* eq = nullptr;
  CheckFabric(fi_eq_open(fabric_.get(), &eq_attr, &eq, nullptr), "fi_eq_open");
  eq_.reset(eq);

  OpenEndpoint(nullptr);
}

void Network::OpenEndpoint(const std::vector<uint8_t>* name) {
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.wait_obj = FI_WAIT_NONE;  // we busy-poll: the tutorial is about speed
  fid_cq* cq = nullptr;
  CheckFabric(fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr), "fi_cq_open");
  cq_.reset(cq);

  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  fid_av* av = nullptr;
  CheckFabric(fi_av_open(domain_.get(), &av_attr, &av, nullptr), "fi_av_open");
  av_.reset(av);

  fid_ep* ep = nullptr;
  CheckFabric(fi_endpoint(domain_.get(), info_.get(), &ep, nullptr), "fi_endpoint");
  ep_.reset(ep);
  CheckFabric(fi_ep_bind(ep_.get(), &eq_->fid, 0), "fi_ep_bind");
  CheckFabric(fi_ep_bind(ep_.get(), &av_->fid, 0), "fi_ep_bind");
  CheckFabric(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind");
  if (name != nullptr) {
    // Before fi_enable: shm names its shared-memory file after it, tcp binds
    // its listening socket to it. After the binds, so that an endpoint whose
    // name is taken can be closed: libfabric's rxm before 1.19 crashes
    // closing one with no address vector (rxm_freeall_conns).
    CheckFabric(fi_setname(&ep_->fid, const_cast<uint8_t*>(name->data()), name->size()),
                "fi_setname");
  }
  // efa: GPUDirect required for GPU memory, and whether WRITEs are the
  // NIC's own (common/device_rdma.h).
  device_rdma_ = ApplyEfaEndpointRules(*info_, OptionsOf(ep_.get()));
  CheckFabric(fi_enable(ep_.get()), "fi_enable");

  size_t addrlen = 0;
  fi_getname(&ep_->fid, nullptr, &addrlen);  // asks for the length
  address_.resize(addrlen);
  CheckFabric(fi_getname(&ep_->fid, address_.data(), &addrlen), "fi_getname");
  address_.resize(addrlen);
}

Network::~Network() {
  // Close in reverse order of opening: the endpoint first (no more traffic),
  // then its completion queue and address vector, the domain, the fabric.
  // Registrations (owned elsewhere) are closed before this runs.
  CloseEndpoint();
  CloseNow(eq_, name_, "event queue");
  CloseNow(domain_, name_, "domain");
  CloseNow(fabric_, name_, "fabric");
}

void Network::CloseEndpoint() {
  CloseNow(ep_, name_, "endpoint");
  CloseNow(cq_, name_, "completion queue");
  CloseNow(av_, name_, "address vector");
  // The provider holds no context of ours any more: give every op back.
  while (in_flight != nullptr) FreeOp(in_flight);
  pending_ops.clear();
  failed_ops.clear();
  posted_transmits = 0;
}

void Network::ReopenDomain() {
  CloseNow(domain_, name_, "domain");
  fid_domain* domain = nullptr;
  CheckFabric(fi_domain(fabric_.get(), info_.get(), &domain, nullptr), "fi_domain");
  domain_.reset(domain);
}

double LinkGbps(const fi_info& info) {
  if (info.nic == nullptr || info.nic->link_attr == nullptr) return 0;
  return static_cast<double>(info.nic->link_attr->speed) / 1e9;
}

MemoryRegion Network::Register(const Buffer& buffer) {
  fi_mr_attr attr{};
  iovec iov{buffer.data(), buffer.size()};
  // FI_SEND | FI_RECV too: the same buffers carry messages, and EFA checks
  // a registration's access against the operation (as the series does).
  attr.access = kRegistrationAccess;
  attr.iface = FI_HMEM_SYSTEM;
  // Without FI_MR_PROV_KEY (shm, tcp) the application picks the keys.
  if (!(info_->domain_attr->mr_mode & FI_MR_PROV_KEY)) attr.requested_key = next_mr_key_++;
  uint64_t flags = 0;
  bool dmabuf = false;
  if (buffer.kind() == MemoryKind::kCuda) {
    if (!hmem_)
      throw UsageError("provider '" + std::string(info_->fabric_attr->prov_name) +
                       "' was opened without FI_HMEM; cannot register CUDA memory");
    attr.iface = FI_HMEM_CUDA;
    attr.device.cuda = buffer.cuda_device();
    // shm takes its GPU-to-GPU (CUDA IPC) path only for device-only memory;
    // without the flag it bounces through host memory, ~40x slower.
    flags |= FI_HMEM_DEVICE_ONLY;
  }
  fid_mr* mr = nullptr;
#if defined(FI_MR_DMABUF)
  // EFA reaches GPU memory through dma-buf where the driver offers it.
  int fd = buffer.kind() == MemoryKind::kCuda &&
                   std::string(info_->fabric_attr->prov_name).find("efa") != std::string::npos
               ? buffer.DmabufFd()
               : -1;
  if (fd >= 0) {
    fi_mr_dmabuf dmabuf_attr{};
    dmabuf_attr.fd = fd;
    dmabuf_attr.offset = 0;
    dmabuf_attr.len = buffer.size();
    dmabuf_attr.base_addr = buffer.data();
    fi_mr_attr dattr = attr;
    dattr.dmabuf = &dmabuf_attr;
    dattr.iov_count = 1;
    if (fi_mr_regattr(domain_.get(), &dattr, flags | FI_MR_DMABUF, &mr) == 0) dmabuf = true;
  }
#endif
  (void)kHaveDmabuf;
  if (mr == nullptr) {
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    CheckFabric(fi_mr_regattr(domain_.get(), &attr, flags, &mr), "fi_mr_regattr");
  }
  FidPtr<fid_mr> owned(mr);
  if (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    CheckFabric(fi_mr_bind(mr, &ep_->fid, 0), "fi_mr_bind");
    CheckFabric(fi_mr_enable(mr), "fi_mr_enable");
  }
  uint64_t remote_addr = virt_addr_ ? reinterpret_cast<uint64_t>(buffer.data()) : 0;
  return MemoryRegion(std::move(owned), remote_addr, buffer.size(), dmabuf);
}

fi_addr_t Network::AddPeer(const std::vector<uint8_t>& address) {
  if (hooks != nullptr) hooks->CheckPeerAddress(*this, address);
  fi_addr_t peer = FI_ADDR_UNSPEC;
  int inserted = fi_av_insert(av_.get(), address.data(), 1, &peer, 0, nullptr);
  if (inserted != 1 || peer == FI_ADDR_UNSPEC || peer == FI_ADDR_NOTAVAIL) {
    if (hooks != nullptr) hooks->AddressVectorRefused(*this);
    throw FabricError("address of " + std::to_string(address.size()) +
                      " bytes rejected by the address vector of " + name_ +
                      (inserted < 0 ? std::string(": ") + fi_strerror(-inserted) : ""));
  }
  return peer;
}

void Network::RemovePeer(fi_addr_t peer) { fi_av_remove(av_.get(), &peer, 1, 0); }

RdmaOp* Network::AllocateOp(bool& from_heap) {
  from_heap = true;
  return new RdmaOp;  // the series: one allocation per operation
}

void Network::ReleaseOp(RdmaOp* op) { delete op; }

RdmaOp* Network::NewOp(OpType type, OpCallback callback) {
  bool from_heap = false;
  RdmaOp* op = AllocateOp(from_heap);
  op->type = type;
  op->callback = std::move(callback);
  op->prev = nullptr;
  op->next = in_flight;
  if (in_flight != nullptr) in_flight->prev = op;
  in_flight = op;
  if (hooks != nullptr) hooks->Queued(*op, from_heap);
  return op;
}

void Network::FreeOp(RdmaOp* op) {
  (op->prev != nullptr ? op->prev->next : in_flight) = op->next;
  if (op->next != nullptr) op->next->prev = op->prev;
  ReleaseOp(op);
}

size_t Network::outstanding_transmits() const {
  size_t transmits = 0;
  for (const RdmaOp* op = in_flight; op != nullptr; op = op->next) {
    if (op->type != OpType::kRecv) ++transmits;
  }
  return transmits;
}

void Network::PostRecv(void* buf, size_t length, void* desc, OpCallback callback) {
  RdmaOp* op = NewOp(OpType::kRecv, std::move(callback));
  op->buf = buf;
  op->length = length;
  op->desc = desc;
  pending_ops.push_back(op);
  ProgressPendingOps();
}

void Network::PostSend(fi_addr_t peer, const void* buf, size_t length, void* desc,
                       OpCallback callback) {
  RdmaOp* op = NewOp(OpType::kSend, std::move(callback));
  op->buf = const_cast<void*>(buf);
  op->length = length;
  op->desc = desc;
  op->peer = peer;
  pending_ops.push_back(op);
  ProgressPendingOps();
}

void Network::PostWrite(const RdmaWrite& write, OpCallback callback) {
  RdmaOp* op = NewOp(OpType::kWrite, std::move(callback));
  op->write = write;
  pending_ops.push_back(op);
  ProgressPendingOps();
}

void Network::ProgressPendingOps() {
  while (!pending_ops.empty()) {
    if (Post(pending_ops.front(), 0) == -FI_EAGAIN) return;
    pending_ops.pop_front();
  }
}

ssize_t Network::Post(RdmaOp* op, uint64_t flags) {
  ProviderCall call = op->type == OpType::kRecv   ? ProviderCall::kRecv
                      : op->type == OpType::kSend ? ProviderCall::kSend
                                                  : ProviderCall::kWrite;
  if (call != ProviderCall::kRecv && posted_transmits >= tx_depth_) {
    if (hooks != nullptr) hooks->HeldBack();
    return -FI_EAGAIN;  // the queue depth it advertised (tx_depth_)
  }
  if (hooks != nullptr) hooks->EnterProvider(call);
  ssize_t ret;
  const char* what;
  if (call == ProviderCall::kRecv) {
    what = "fi_recv";
    ret = fi_recv(ep_.get(), op->buf, op->length, op->desc, FI_ADDR_UNSPEC, &op->context);
  } else if (call == ProviderCall::kSend) {
    what = "fi_send";
    ret = fi_send(ep_.get(), op->buf, op->length, op->desc, op->peer, &op->context);
  } else {
    what = "fi_writemsg";
    // The WRITE, addressed as the series does: local buffer and its
    // descriptor, the peer, and where in the peer's registration it lands.
    const RdmaWrite& w = op->write;
    iovec iov = {.iov_base = const_cast<void*>(w.local), .iov_len = w.length};
    void* desc = w.local_desc;
    fi_rma_iov rma = {.addr = w.remote_addr, .len = w.length, .key = w.remote_key};
    fi_msg_rma msg = {
        .msg_iov = &iov,
        .desc = &desc,
        .iov_count = 1,
        .addr = w.peer,
        .rma_iov = &rma,
        .rma_iov_count = 1,
        .context = &op->context,
        .data = w.cq_data,
    };
    flags |= FI_COMPLETION | (w.has_cq_data ? FI_REMOTE_CQ_DATA : 0);
    ret = fi_writemsg(ep_.get(), &msg, flags);
  }
  if (hooks != nullptr) hooks->LeaveProvider(call, ret, flags);
  if (ret == -FI_EAGAIN) return ret;
  if (ret < 0) {
    // The caller hears of it as an error completion, at the next poll.
    op->error = static_cast<int>(-ret);
    op->error_message = std::string(what) + ": " + fi_strerror(op->error);
    failed_ops.push_back(op);
    return ret;
  }
  op->posted = true;
  if (call != ProviderCall::kRecv) ++posted_transmits;
  return 0;
}

size_t Network::PollCompletion() {
  size_t handled = failed_ops.size();  // posts that failed for good
  // An empty deque still allocates: swapped out only when a post failed.
  if (handled > 0) {
    std::deque<RdmaOp*> failed;
    failed.swap(failed_ops);  // a callback that fails again waits for the next poll
    for (RdmaOp* op : failed) Finish(op);
  }

  fi_cq_data_entry entries[kCqReadCount];
  for (;;) {
    if (hooks != nullptr) hooks->EnterProvider(ProviderCall::kCqRead);
    ssize_t n = fi_cq_read(cq_.get(), entries, kCqReadCount);
    if (hooks != nullptr) hooks->LeaveProvider(ProviderCall::kCqRead, n, 0);
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      HandleErrorCompletion();
      ++handled;
      continue;
    }
    CheckFabric(n, "fi_cq_read");
    for (ssize_t i = 0; i < n; ++i) {
      const fi_cq_data_entry& entry = entries[i];
      if (IsRemoteWrite(entry)) {
        if (on_remote_write_) on_remote_write_(*this, entry.data);
        continue;
      }
      auto* op = static_cast<RdmaOp*>(entry.op_context);
      if (op->type == OpType::kRecv) op->received = entry.len;
      Finish(op);
    }
    handled += static_cast<size_t>(n);
  }
  ProgressPendingOps();
  return handled;
}

void Network::Finish(RdmaOp* op) {
  if (op->posted && op->type != OpType::kRecv) --posted_transmits;
  // Callbacks may post new operations; the op is given back after.
  if (hooks == nullptr || hooks->Deliver(*op)) Complete(op);
  FreeOp(op);
}

void Network::Complete(RdmaOp* op) {
  if (op->callback) op->callback(*this, *op);
}

void Network::HandleErrorCompletion() {
  fi_cq_err_entry err{};
  if (hooks != nullptr) hooks->EnterProvider(ProviderCall::kCqReadErr);
  ssize_t ret = fi_cq_readerr(cq_.get(), &err, 0);
  if (hooks != nullptr) hooks->LeaveProvider(ProviderCall::kCqReadErr, ret, 0);
  if (ret == -FI_EAGAIN) return;
  CheckFabric(ret, "fi_cq_readerr");
  // Positive codes for callers; shm 1.17 reports some negated (-FI_ETRUNC).
  int error = err.err > 0 ? err.err : err.err < 0 ? -err.err : FI_EOTHER;
  const char* detail = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, nullptr, 0);
  std::string message = fi_strerror(error);
  if (detail != nullptr && *detail && message != detail)
    message += std::string(" (") + detail + ")";
  auto* op = static_cast<RdmaOp*>(err.op_context);
  if (op == nullptr || (err.flags & FI_REMOTE_WRITE) != 0) {
    // A failed remote write into our memory, or (shm 1.17) one of ours
    // into a process that has died, which then never completes.
    if (hooks != nullptr) hooks->ErrorWithoutOp(*this, message);
    return;
  }
  op->error = error;
  op->error_message = std::move(message);
  if (op->type == OpType::kRecv) op->received = err.len;
  Finish(op);
}

}  // namespace tutorial
