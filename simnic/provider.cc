// The libfabric side of simnic: fi_prov_ini, fi_getinfo's answer (one
// fi_info per simulated NIC, EFA's rules in the hints check), and the
// function tables of every object. The data path is in engine.cc.
//
// One binary for libfabric 1.17 and 2.x: the provider reports the loading
// core's fi_version(), and allocates fi_info through the core's current
// fi_dupinfo (found at run time), because 2.x grew struct fi_domain_attr and
// versioned fi_dupinfo/fi_freeinfo again (FABRIC_1.9, src/fabric.c): an
// fi_info made by the 1.17-era symbol this library links against would be
// too small for a 2.x core.
#include <dlfcn.h>
#include <fcntl.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "simnic/nic.h"

namespace simnic {
namespace {

constexpr uint32_t kProviderVersion = FI_VERSION(1, 0);
constexpr uint64_t kCaps = FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_READ | FI_WRITE |
                           FI_REMOTE_READ | FI_REMOTE_WRITE | FI_LOCAL_COMM | FI_REMOTE_COMM;
constexpr int kRequiredMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

// Any unsupported call: the right signature, -FI_ENOSYS.
template <typename R, typename... Args>
R NoSys(Args...) {
  return static_cast<R>(-FI_ENOSYS);
}

// fi_ops without tostr/ops_set: libfabric's fi_tostr looks at the size.
constexpr size_t kFiOpsSize = offsetof(struct fi_ops, tostr);

// ---------------------------------------------------------------------------
// fi_info allocation through the loading core.

using DupInfo = fi_info* (*)(const fi_info*);
using FreeInfo = void (*)(fi_info*);

struct CoreCalls {
  DupInfo dupinfo = &fi_dupinfo;
  FreeInfo freeinfo = &fi_freeinfo;
};

const CoreCalls& Core() {
  static const CoreCalls calls = [] {
    CoreCalls c;
    Dl_info where{};
    // The libfabric that defines fi_version is the one that loaded us.
    if (dladdr(reinterpret_cast<void*>(&fi_version), &where) != 0 && where.dli_fname != nullptr) {
      if (void* core = dlopen(where.dli_fname, RTLD_NOW | RTLD_NOLOAD)) {
        // dlsym gives the default (newest) version of a versioned symbol.
        if (void* f = dlsym(core, "fi_dupinfo")) c.dupinfo = reinterpret_cast<DupInfo>(f);
        if (void* f = dlsym(core, "fi_freeinfo")) c.freeinfo = reinterpret_cast<FreeInfo>(f);
        dlclose(core);
      }
    }
    return c;
  }();
  return calls;
}

// ---------------------------------------------------------------------------
// The NIC attributes of an fi_info: ours to duplicate and free (the core
// asks through fi_control(FI_DUP) and fi_close).

int NicClose(fid* f);
int NicControl(fid* f, int command, void* arg);
fi_ops nic_ops = {kFiOpsSize,
                  NicClose,
                  NoSys<int, fid*, fid*, uint64_t>,
                  NicControl,
                  NoSys<int, fid*, const char*, uint64_t, void**, void*>,
                  nullptr,
                  nullptr};

char* Dup(const char* s) { return s ? strdup(s) : nullptr; }

// `model`: the model's one-line summary, which the NIC carries as its
// "firmware" so that applications can print it with their results (every
// simulated number must say what made it).
fid_nic* NewNic(int index, double line_bps, const char* model) {
  auto* nic = static_cast<fid_nic*>(calloc(1, sizeof(fid_nic)));
  nic->fid.fclass = FI_CLASS_NIC;
  nic->fid.ops = &nic_ops;
  nic->device_attr = static_cast<fi_device_attr*>(calloc(1, sizeof(fi_device_attr)));
  nic->bus_attr = static_cast<fi_bus_attr*>(calloc(1, sizeof(fi_bus_attr)));
  nic->link_attr = static_cast<fi_link_attr*>(calloc(1, sizeof(fi_link_attr)));
  std::string name = "simnic" + std::to_string(index);
  nic->device_attr->name = Dup(name.c_str());
  nic->device_attr->device_id = Dup("0xefa1");
  nic->device_attr->device_version = Dup("1");
  nic->device_attr->vendor_id = Dup("0x1d0f");
  nic->device_attr->driver = Dup("simnic (simulated)");
  nic->device_attr->firmware = Dup(model);
  nic->bus_attr->bus_type = FI_BUS_UNKNOWN;
  nic->link_attr->address = Dup(name.c_str());
  nic->link_attr->mtu = 8192;
  nic->link_attr->speed = static_cast<size_t>(line_bps);
  nic->link_attr->state = FI_LINK_UP;
  nic->link_attr->network_type = Dup("simulated");
  return nic;
}

int NicClose(fid* f) {
  auto* nic = reinterpret_cast<fid_nic*>(f);
  if (nic->device_attr) {
    free(nic->device_attr->name);
    free(nic->device_attr->device_id);
    free(nic->device_attr->device_version);
    free(nic->device_attr->vendor_id);
    free(nic->device_attr->driver);
    free(nic->device_attr->firmware);
    free(nic->device_attr);
  }
  free(nic->bus_attr);
  if (nic->link_attr) {
    free(nic->link_attr->address);
    free(nic->link_attr->network_type);
    free(nic->link_attr);
  }
  free(nic->prov_attr);
  free(nic);
  return 0;
}

int NicControl(fid* f, int command, void* arg) {
  if (command != FI_DUP) return -FI_ENOSYS;
  auto* nic = reinterpret_cast<fid_nic*>(f);
  int index = 0;
  if (nic->device_attr && nic->device_attr->name) index = std::atoi(nic->device_attr->name + 6);
  fid_nic* copy = NewNic(index, nic->link_attr ? static_cast<double>(nic->link_attr->speed) : 0,
                         nic->device_attr ? nic->device_attr->firmware : nullptr);
  *static_cast<fid_nic**>(arg) = copy;
  return 0;
}

// ---------------------------------------------------------------------------
// fi_getinfo

bool Refuse(const char* why) {
  if (std::getenv("SIMNIC_VERBOSE") != nullptr) std::fprintf(stderr, "simnic: %s\n", why);
  return false;
}

// EFA's rules, checked on the application's hints.
bool HintsAcceptable(uint32_t version, const fi_info* hints, bool* hmem) {
  *hmem = false;
  if (hints == nullptr) return true;
  if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM)
    return Refuse("only FI_EP_RDM endpoints");
  if (hints->caps & FI_HMEM) {
    // As the efa provider on p5 hardware: below API 1.18 device RDMA stays
    // off, and with it FI_HMEM (prov/efa/src/rdm/efa_rdm_util.c).
    if (FI_VERSION_LT(version, FI_VERSION(1, 18)))
      return Refuse("FI_HMEM needs API 1.18 or newer (as EFA on a p5)");
    *hmem = true;
  }
  if (hints->caps & ~(kCaps | FI_HMEM)) return Refuse("capabilities beyond MSG and RMA asked");
  if (!(hints->mode & FI_CONTEXT2))
    return Refuse("the application must give FI_CONTEXT2 (as efa-direct asks)");
  if (hints->addr_format != FI_FORMAT_UNSPEC && hints->addr_format != FI_ADDR_EFA)
    return Refuse("addresses are FI_ADDR_EFA");
  if (hints->domain_attr) {
    int required = kRequiredMrMode | (*hmem ? FI_MR_HMEM : 0);
    if ((hints->domain_attr->mr_mode & required) != required)
      return Refuse(
          "mr_mode must hold FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, "
          "FI_MR_PROV_KEY (and FI_MR_HMEM with FI_HMEM)");
    if (hints->domain_attr->cq_data_size > 4) return Refuse("remote CQ data is 4 bytes");
    if (hints->domain_attr->mr_key_size > 4) return Refuse("keys are 4 bytes");
  } else {
    return Refuse(
        "mr_mode must hold FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY");
  }
  if (hints->fabric_attr && hints->fabric_attr->name &&
      std::strcmp(hints->fabric_attr->name, "simnic") != 0)
    return false;
  return true;
}

fi_info* NewInfo(const Model& m, int index, const fi_info* hints, bool hmem) {
  fi_info* info = Core().dupinfo(nullptr);
  if (info == nullptr) return nullptr;
  uint64_t caps = hints && hints->caps ? (hints->caps & (kCaps | FI_HMEM)) : kCaps;
  if (!hmem) caps &= ~FI_HMEM;
  info->caps = caps;
  info->mode = FI_CONTEXT2;
  info->addr_format = FI_ADDR_EFA;

  fi_tx_attr* tx = info->tx_attr;
  tx->caps = caps;
  tx->mode = FI_CONTEXT2;
  tx->op_flags = hints && hints->tx_attr && hints->tx_attr->op_flags ? hints->tx_attr->op_flags
                                                                     : FI_COMPLETION;
  tx->msg_order = FI_ORDER_SAS;
  tx->inject_size = 0;
  tx->size = m.tx_depth;
  tx->iov_limit = 1;
  tx->rma_iov_limit = 1;

  fi_rx_attr* rx = info->rx_attr;
  rx->caps = caps;
  rx->mode = FI_CONTEXT2;
  rx->msg_order = FI_ORDER_SAS;
  rx->size = m.rx_depth;
  rx->iov_limit = 1;

  fi_ep_attr* ep = info->ep_attr;
  ep->type = FI_EP_RDM;
  ep->protocol = FI_PROTO_EFA;
  ep->protocol_version = 1;
  ep->max_msg_size = m.direct ? m.mtu : (size_t{1} << 30);
  ep->tx_ctx_cnt = 1;
  ep->rx_ctx_cnt = 1;

  fi_domain_attr* d = info->domain_attr;
  d->name = Dup(("simnic" + std::to_string(index)).c_str());
  fi_threading threading =
      hints && hints->domain_attr ? hints->domain_attr->threading : FI_THREAD_UNSPEC;
  d->threading = threading == FI_THREAD_UNSPEC ? FI_THREAD_SAFE : threading;
  d->control_progress = FI_PROGRESS_AUTO;
  d->data_progress = FI_PROGRESS_AUTO;  // the engine threads progress everything
  d->resource_mgmt = FI_RM_ENABLED;
  d->av_type = FI_AV_TABLE;
  d->mr_mode = kRequiredMrMode | (hmem ? FI_MR_HMEM : 0);
  d->mr_key_size = 4;
  d->cq_data_size = 4;
  d->cq_cnt = 1024;
  d->ep_cnt = 256;
  d->tx_ctx_cnt = 1;
  d->rx_ctx_cnt = 1;
  d->max_ep_tx_ctx = 1;
  d->max_ep_rx_ctx = 1;
  d->mr_iov_limit = 1;
  d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
  d->mr_cnt = (1u << KeyTable::kIndexBits) - 1;

  info->fabric_attr->name = Dup("simnic");
  info->fabric_attr->prov_version = kProviderVersion;
  info->nic = NewNic(index, m.line_bps(), m.Summary().c_str());
  return info;
}

int GetInfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info) {
  (void)node;
  (void)service;
  (void)flags;
  *info = nullptr;
  bool hmem = false;
  if (!HintsAcceptable(version, hints, &hmem)) return -FI_ENODATA;
  // The environment is read at each fi_getinfo, so one process (a test) can
  // open NICs under several models one after another.
  ReloadModel();
  const Model& m = GetModel();
  const char* only = hints && hints->domain_attr ? hints->domain_attr->name : nullptr;
  fi_info* tail = nullptr;
  for (int i = 0; i < m.nics; ++i) {
    if (only != nullptr && ("simnic" + std::to_string(i)) != only) continue;
    fi_info* one = NewInfo(m, i, hints, hmem);
    if (one == nullptr) break;
    if (tail == nullptr) {
      *info = one;
    } else {
      tail->next = one;
    }
    tail = one;
  }
  return *info ? 0 : -FI_ENODATA;
}

// ---------------------------------------------------------------------------
// Event queue: simnic never has asynchronous events, but EFA wants one bound.

int EqClose(fid* f) {
  delete reinterpret_cast<EventQueue*>(f);
  return 0;
}
// SIMNIC_EQ_ERROR (nic.h, EventQueue): the appearances of the file so far,
// and the domain each one named (-1: every domain).
struct EqInjections {
  std::mutex mutex;
  std::vector<int> domains;
};
EqInjections& Injections() {
  static EqInjections injections;
  return injections;
}

// Takes the file if it is there; returns how many appearances there were.
uint64_t PollEqErrorFile() {
  static const char* path = std::getenv("SIMNIC_EQ_ERROR");
  EqInjections& in = Injections();
  std::lock_guard<std::mutex> lock(in.mutex);
  if (path == nullptr || *path == 0) return in.domains.size();
  std::FILE* file = std::fopen(path, "r");
  if (file == nullptr) return in.domains.size();
  char name[64] = {};
  size_t n = std::fread(name, 1, sizeof(name) - 1, file);
  std::fclose(file);
  if (std::remove(path) != 0) return in.domains.size();  // another process took it
  std::string domain(name, n);
  domain.erase(domain.find_last_not_of(" \n") + 1);
  in.domains.push_back(domain.rfind("simnic", 0) == 0 ? std::atoi(domain.c_str() + 6) : -1);
  return in.domains.size();
}

ssize_t EqRead(fid_eq* f, uint32_t*, void*, size_t, uint64_t) {
  auto* q = reinterpret_cast<EventQueue*>(f);
  uint64_t appearances = PollEqErrorFile();
  std::lock_guard<std::mutex> lock(q->mutex);
  if (q->domain >= 0) {
    EqInjections& in = Injections();
    std::lock_guard<std::mutex> injections(in.mutex);
    for (; q->injections_seen < appearances; ++q->injections_seen) {
      int target = in.domains[q->injections_seen];
      if (target < 0 || target == q->domain) q->error_pending = true;
    }
  }
  return q->error_pending ? -FI_EAVAIL : -FI_EAGAIN;
}
ssize_t EqReadErr(fid_eq* f, fi_eq_err_entry* entry, uint64_t) {
  auto* q = reinterpret_cast<EventQueue*>(f);
  std::lock_guard<std::mutex> lock(q->mutex);
  if (!q->error_pending) return -FI_EAGAIN;
  q->error_pending = false;
  *entry = fi_eq_err_entry{};
  entry->fid = &f->fid;
  entry->err = FI_EIO;
  entry->prov_errno = kEqError;
  return sizeof(*entry);
}
ssize_t EqSread(fid_eq*, uint32_t*, void*, size_t, int, uint64_t) { return -FI_EAGAIN; }
const char* EqStrerror(fid_eq*, int prov_errno, const void*, char*, size_t) {
  return ProviderErrorText(prov_errno);
}
fi_ops eq_fid_ops = {kFiOpsSize,
                     EqClose,
                     NoSys<int, fid*, fid*, uint64_t>,
                     NoSys<int, fid*, int, void*>,
                     NoSys<int, fid*, const char*, uint64_t, void**, void*>,
                     nullptr,
                     nullptr};
fi_ops_eq eq_ops = {
    sizeof(fi_ops_eq), EqRead,
    EqReadErr,         NoSys<ssize_t, fid_eq*, uint32_t, const void*, size_t, uint64_t>,
    EqSread,           EqStrerror};

int EqOpen(fid_fabric*, fi_eq_attr*, fid_eq** eq, void* context) {
  auto* q = new EventQueue();
  q->eq.fid.fclass = FI_CLASS_EQ;
  q->eq.fid.context = context;
  q->eq.fid.ops = &eq_fid_ops;
  q->eq.ops = &eq_ops;
  *eq = &q->eq;
  return 0;
}

// ---------------------------------------------------------------------------
// Completion queue

CompletionQueue* CqOf(fid_cq* f) { return reinterpret_cast<CompletionQueue*>(f); }

void ReleaseCredit(const CqEntry& e) {
  if (e.credit == kTxCredit) e.credits->tx.fetch_sub(1, std::memory_order_relaxed);
  if (e.credit == kRxCredit) e.credits->rx.fetch_sub(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// What a provider call costs the calling thread (docs/simnic.md, "Costs").

int ThisThreadTid() {
  thread_local int tid = 0;
  if (tid == 0) tid = static_cast<int>(syscall(SYS_gettid));
  return tid;
}

// Where the caller runs for this call (its virtual socket, or where the
// simulated p5 scheduler put an unpinned thread), and what the call costs
// it: Remote() costs are dearer from the other socket than the NIC's. The
// charges are the call's whole length: when the call ends, the caller spins
// until it has taken what was charged since the call began, so simnic's own
// work runs inside the charges instead of on top of them (where it would
// add the simulator's speed on this machine to the model). A cold-cache
// refill owed after a simulated move is part of the same charge.
class ThreadCharge {
 public:
  ThreadCharge(const Model& m, int nic_socket) : m_(m), start_(NowNs()) {
    Placement place = PlaceThisThread(m, start_);
    socket_ = place.socket;
    remote_ = place.socket >= 0 && place.socket != nic_socket;
    charged_ = place.refill_ns;
  }
  ~ThreadCharge() { EndOfCallOnThisThread(SpinUntil(start_ + charged_)); }
  ThreadCharge(const ThreadCharge&) = delete;
  ThreadCharge& operator=(const ThreadCharge&) = delete;
  bool remote() const { return remote_; }
  int socket() const { return socket_; }
  void Local(uint64_t ns) { charged_ += ns; }
  void Remote(uint64_t ns) {
    charged_ +=
        remote_ ? static_cast<uint64_t>(static_cast<double>(ns) * m_.remote_numa_factor) : ns;
  }
  const Model& model() const { return m_; }

 private:
  const Model& m_;
  uint64_t start_;
  uint64_t charged_ = 0;
  int socket_ = -1;
  bool remote_ = false;
};

// Takes a BoundedLock (or none) for one call; a lock last taken by another
// thread charges its line's move.
class CallLock {
 public:
  CallLock(BoundedLock* lock, ThreadCharge& charge) : lock_(lock) {
    if (lock_ == nullptr) return;
    if (!lock_->TryLockFor(BoundedLock::kLockSpinNs)) {
      lock_ = nullptr;
      held_ = false;
      return;
    }
    int tid = ThisThreadTid();
    if (lock_->last_tid != 0 && lock_->last_tid != tid) {
      uint64_t ns = charge.model().lock_line_ns;
      bool far =
          lock_->last_socket >= 0 && charge.socket() >= 0 && lock_->last_socket != charge.socket();
      charge.Local(far ? static_cast<uint64_t>(ns * charge.model().remote_numa_factor) : ns);
    }
    lock_->last_tid = tid;
    lock_->last_socket = charge.socket();
  }
  ~CallLock() {
    if (lock_ != nullptr) lock_->Unlock();
  }
  bool held() const { return held_; }

 private:
  BoundedLock* lock_;
  bool held_ = true;
};

void StoreEntry(fi_cq_format format, void* buf, size_t n, const CqEntry& e) {
  switch (format) {
    case FI_CQ_FORMAT_CONTEXT:
      static_cast<fi_cq_entry*>(buf)[n] = fi_cq_entry{e.op_context};
      break;
    case FI_CQ_FORMAT_MSG:
      static_cast<fi_cq_msg_entry*>(buf)[n] = fi_cq_msg_entry{e.op_context, e.flags, e.len};
      break;
    default:
      static_cast<fi_cq_data_entry*>(buf)[n] =
          fi_cq_data_entry{e.op_context, e.flags, e.len, e.buf, e.data};
      break;
  }
}

ssize_t CqRead(fid_cq* f, void* buf, size_t count) {
  CompletionQueue* cq = CqOf(f);
  const Model& m = *cq->domain->model;
  ThreadCharge charge(m, cq->domain->nic_node);
  CallLock lock(cq->locked ? &cq->lock : nullptr, charge);
  if (!lock.held()) return -FI_EAGAIN;  // another thread holds it: try again
  // A read's software path, whether or not it finds anything: the same from
  // either socket (a ring line the NIC has not written since stays in the
  // reader's cache); each entry it returns is a line the NIC wrote, dearer
  // from the other socket.
  charge.Local(m.cq_poll_ns);
  uint64_t consumed = cq->consumed.load(std::memory_order_relaxed);
  uint64_t produced = cq->produced.load(std::memory_order_acquire);
  if (consumed == produced) return -FI_EAGAIN;
  size_t n = 0;
  while (n < count && consumed < produced) {
    const CqEntry& e = cq->entries[consumed & cq->mask];
    if (e.err != 0) break;
    StoreEntry(cq->format, buf, n, e);
    ReleaseCredit(e);
    ++consumed;
    ++n;
  }
  cq->consumed.store(consumed, std::memory_order_release);
  charge.Remote(static_cast<uint64_t>(m.cq_entry_ns) * n);
  return n > 0 ? static_cast<ssize_t>(n) : -FI_EAVAIL;
}

ssize_t CqReadFrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src_addr) {
  ssize_t n = CqRead(f, buf, count);
  for (ssize_t i = 0; src_addr != nullptr && i < n; ++i) src_addr[i] = FI_ADDR_NOTAVAIL;
  return n;
}

ssize_t CqReadErr(fid_cq* f, fi_cq_err_entry* buf, uint64_t) {
  CompletionQueue* cq = CqOf(f);
  ThreadCharge charge(*cq->domain->model, cq->domain->nic_node);
  CallLock lock(cq->locked ? &cq->lock : nullptr, charge);
  if (!lock.held()) return -FI_EAGAIN;
  uint64_t consumed = cq->consumed.load(std::memory_order_relaxed);
  if (consumed == cq->produced.load(std::memory_order_acquire)) return -FI_EAGAIN;
  const CqEntry& e = cq->entries[consumed & cq->mask];
  if (e.err == 0) return -FI_EAGAIN;
  buf->op_context = e.op_context;
  buf->flags = e.flags;
  buf->len = e.len;
  buf->buf = e.buf;
  buf->data = e.data;
  buf->tag = 0;
  buf->olen = e.olen;
  buf->err = e.err;
  buf->prov_errno = e.prov_errno;
  buf->err_data = nullptr;
  buf->err_data_size = 0;
  ReleaseCredit(e);
  cq->consumed.store(consumed + 1, std::memory_order_release);
  return 1;
}

const char* CqStrerror(fid_cq*, int prov_errno, const void*, char* buf, size_t len) {
  const char* text = ProviderErrorText(prov_errno);
  if (buf != nullptr && len > 0) {
    std::snprintf(buf, len, "%s", text);
    return buf;
  }
  return text;
}

int CqClose(fid* f) {
  CompletionQueue* cq = reinterpret_cast<CompletionQueue*>(f);
  if (cq->bound_endpoints.load() > 0) return -FI_EBUSY;
  cq->domain->refs.fetch_sub(1);
  delete cq;
  return 0;
}

fi_ops cq_fid_ops = {kFiOpsSize,
                     CqClose,
                     NoSys<int, fid*, fid*, uint64_t>,
                     NoSys<int, fid*, int, void*>,
                     NoSys<int, fid*, const char*, uint64_t, void**, void*>,
                     nullptr,
                     nullptr};
fi_ops_cq cq_ops = {sizeof(fi_ops_cq),
                    CqRead,
                    CqReadFrom,
                    CqReadErr,
                    NoSys<ssize_t, fid_cq*, void*, size_t, const void*, int>,
                    NoSys<ssize_t, fid_cq*, void*, size_t, fi_addr_t*, const void*, int>,
                    NoSys<int, fid_cq*>,
                    CqStrerror};

int CqOpen(fid_domain* d, fi_cq_attr* attr, fid_cq** out, void* context) {
  Domain* domain = reinterpret_cast<Domain*>(d);
  fi_cq_format format = attr ? attr->format : FI_CQ_FORMAT_UNSPEC;
  if (format == FI_CQ_FORMAT_UNSPEC) format = FI_CQ_FORMAT_DATA;
  if (format != FI_CQ_FORMAT_CONTEXT && format != FI_CQ_FORMAT_MSG && format != FI_CQ_FORMAT_DATA)
    return -FI_ENOSYS;
  if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
    return -FI_ENOSYS;  // busy polling only, as the tutorial does
  auto* cq = new CompletionQueue();
  cq->cq.fid.fclass = FI_CLASS_CQ;
  cq->cq.fid.context = context;
  cq->cq.fid.ops = &cq_fid_ops;
  cq->cq.ops = &cq_ops;
  cq->domain = domain;
  cq->format = format;
  cq->locked = domain->locked;
  size_t size = 64;
  while (size < domain->model->cq_entries) size <<= 1;
  cq->entries.resize(size);
  cq->mask = size - 1;
  domain->refs.fetch_add(1);
  *out = &cq->cq;
  return 0;
}

// ---------------------------------------------------------------------------
// Address vector

AddressVector* AvOf(fid_av* f) { return reinterpret_cast<AddressVector*>(f); }

void RetireOld(AddressVector* av, uint64_t now) {
  constexpr uint64_t kKeepNs = 30ull * 1000000000ull;
  while (!av->retired.empty() && now - av->retired.front().first > kKeepNs) av->retired.pop_front();
}

int AvInsert(fid_av* f, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t, void*) {
  AddressVector* av = AvOf(f);
  std::lock_guard<std::mutex> lock(av->mutex);
  RetireOld(av, NowNs());
  int inserted = 0;
  int last_error = 0;
  for (size_t i = 0; i < count; ++i) {
    Address address;
    std::memcpy(&address, static_cast<const uint8_t*>(addr) + i * sizeof(Address), sizeof(Address));
    std::string error;
    std::shared_ptr<PeerRegion> peer = PeerRegion::Open(address, &error);
    if (!peer || (av->free_slots.empty() && av->used == AddressVector::kCapacity)) {
      if (std::getenv("SIMNIC_VERBOSE") != nullptr)
        std::fprintf(stderr, "simnic: fi_av_insert: %s\n", peer ? "AV full" : error.c_str());
      last_error = peer ? -FI_ENOSPC : -FI_EADDRNOTAVAIL;
      if (fi_addr) fi_addr[i] = FI_ADDR_NOTAVAIL;
      continue;
    }
    size_t slot = 0;
    if (!av->free_slots.empty()) {
      slot = av->free_slots.back();
      av->free_slots.pop_back();
    } else {
      slot = av->used++;
      av->addresses.resize(av->used);
      av->peers.resize(av->used);
    }
    AddressBytes bytes;
    std::memcpy(bytes.data(), &address, bytes.size());
    av->addresses[slot] = bytes;
    av->peers[slot] = peer;
    av->known.insert(bytes);
    av->lookup[slot].store(peer.get(), std::memory_order_release);
    if (fi_addr) fi_addr[i] = slot;
    ++inserted;
  }
  av->generation.fetch_add(1, std::memory_order_release);
  // One address that cannot be reached: say why rather than "0 inserted".
  if (count == 1 && inserted == 0) return last_error;
  return inserted;
}

int AvRemove(fid_av* f, fi_addr_t* fi_addr, size_t count, uint64_t) {
  AddressVector* av = AvOf(f);
  std::lock_guard<std::mutex> lock(av->mutex);
  uint64_t now = NowNs();
  for (size_t i = 0; i < count; ++i) {
    fi_addr_t a = fi_addr[i];
    if (a >= av->used || !av->peers[a]) return -FI_EINVAL;
    av->lookup[a].store(nullptr, std::memory_order_release);
    auto known = av->known.find(av->addresses[a]);
    if (known != av->known.end()) av->known.erase(known);
    av->retired.emplace_back(now, std::move(av->peers[a]));
    av->peers[a].reset();
    av->free_slots.push_back(a);
  }
  av->generation.fetch_add(1, std::memory_order_release);
  RetireOld(av, now);
  return 0;
}

int AvLookup(fid_av* f, fi_addr_t fi_addr, void* addr, size_t* addrlen) {
  AddressVector* av = AvOf(f);
  std::lock_guard<std::mutex> lock(av->mutex);
  if (fi_addr >= av->used || !av->peers[fi_addr]) return -FI_EINVAL;
  std::memcpy(addr, av->addresses[fi_addr].data(), std::min(*addrlen, sizeof(Address)));
  *addrlen = sizeof(Address);
  return 0;
}

const char* AvStraddr(fid_av*, const void* addr, char* buf, size_t* len) {
  std::string text = "simnic://";
  const auto* bytes = static_cast<const uint8_t*>(addr);
  char hex[3];
  for (size_t i = 0; i < sizeof(Address); ++i) {
    std::snprintf(hex, sizeof(hex), "%02x", bytes[i]);
    text += hex;
  }
  if (buf != nullptr && *len > 0) std::snprintf(buf, *len, "%s", text.c_str());
  *len = text.size() + 1;
  return buf;
}

int AvClose(fid* f) {
  AddressVector* av = reinterpret_cast<AddressVector*>(f);
  if (av->bound_endpoints.load() > 0) return -FI_EBUSY;
  av->domain->refs.fetch_sub(1);
  delete av;
  return 0;
}

fi_ops av_fid_ops = {kFiOpsSize,
                     AvClose,
                     NoSys<int, fid*, fid*, uint64_t>,
                     NoSys<int, fid*, int, void*>,
                     NoSys<int, fid*, const char*, uint64_t, void**, void*>,
                     nullptr,
                     nullptr};
fi_ops_av av_ops = {
    sizeof(fi_ops_av),
    AvInsert,
    NoSys<int, fid_av*, const char*, const char*, fi_addr_t*, uint64_t, void*>,
    NoSys<int, fid_av*, const char*, size_t, const char*, size_t, fi_addr_t*, uint64_t, void*>,
    AvRemove,
    AvLookup,
    AvStraddr,
    NoSys<int, fid_av*, fi_av_set_attr*, fid_av_set**, void*>};

int AvOpen(fid_domain* d, fi_av_attr* attr, fid_av** out, void* context) {
  if (attr && attr->type != FI_AV_UNSPEC && attr->type != FI_AV_TABLE) return -FI_ENOSYS;
  Domain* domain = reinterpret_cast<Domain*>(d);
  auto* av = new AddressVector();
  av->av.fid.fclass = FI_CLASS_AV;
  av->av.fid.context = context;
  av->av.fid.ops = &av_fid_ops;
  av->av.ops = &av_ops;
  av->domain = domain;
  av->lookup.reset(new std::atomic<PeerRegion*>[AddressVector::kCapacity]);
  for (size_t i = 0; i < AddressVector::kCapacity; ++i) av->lookup[i].store(nullptr);
  domain->refs.fetch_add(1);
  *out = &av->av;
  return 0;
}

// ---------------------------------------------------------------------------
// Memory registration

int MrClose(fid* f) {
  auto* mr = reinterpret_cast<MemoryRegion*>(f);
  mr->domain->keys.Remove(mr->index);
  mr->domain->refs.fetch_sub(1);
  delete mr;
  return 0;
}

fi_ops mr_fid_ops = {kFiOpsSize,
                     MrClose,
                     NoSys<int, fid*, fid*, uint64_t>,
                     NoSys<int, fid*, int, void*>,
                     NoSys<int, fid*, const char*, uint64_t, void**, void*>,
                     nullptr,
                     nullptr};

int MrRegAttr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** out) {
  Domain* domain = reinterpret_cast<Domain*>(f);
  constexpr uint64_t kDmabuf = 1ull << 40;  // FI_MR_DMABUF (1.20+)
  if (flags & kDmabuf) return -FI_EOPNOTSUPP;
  if (attr == nullptr || attr->iov_count != 1 || attr->mr_iov == nullptr) return -FI_EINVAL;
  // simnic moves host memory only; below API 1.18 FI_HMEM is refused already.
  if (attr->iface != FI_HMEM_SYSTEM) return -FI_EOPNOTSUPP;
  auto* mr = new MemoryRegion();
  mr->domain = domain;
  mr->addr = reinterpret_cast<uint64_t>(attr->mr_iov[0].iov_base);
  mr->len = attr->mr_iov[0].iov_len;
  mr->access = attr->access;
  uint32_t key = domain->keys.Add(mr->addr, mr->len, mr->access, &mr->index);
  if (key == 0) {
    delete mr;
    return -FI_ENOSPC;
  }
  mr->mr.fid.fclass = FI_CLASS_MR;
  mr->mr.fid.context = attr->context;
  mr->mr.fid.ops = &mr_fid_ops;
  mr->mr.mem_desc = mr;
  mr->mr.key = key;
  domain->refs.fetch_add(1);
  *out = &mr->mr;
  return 0;
}

int MrRegv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
           uint64_t requested_key, uint64_t flags, fid_mr** out, void* context) {
  fi_mr_attr attr{};
  attr.mr_iov = iov;
  attr.iov_count = count;
  attr.access = access;
  attr.offset = offset;
  attr.requested_key = requested_key;
  attr.context = context;
  attr.iface = FI_HMEM_SYSTEM;
  return MrRegAttr(f, &attr, flags, out);
}

int MrReg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset,
          uint64_t requested_key, uint64_t flags, fid_mr** out, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  return MrRegv(f, &iov, 1, access, offset, requested_key, flags, out, context);
}

fi_ops_mr mr_ops = {sizeof(fi_ops_mr), MrReg, MrRegv, MrRegAttr};

// ---------------------------------------------------------------------------
// Endpoint: posting

Endpoint* EpOf(fid_ep* f) { return reinterpret_cast<Endpoint*>(f); }

// The doorbell: an uncached write to the NIC, dearer from the other socket.
void RingDoorbell(Endpoint* ep, ThreadCharge& charge) {
  ++ep->doorbells;
  if (charge.remote()) ++ep->remote_doorbells;
  charge.Remote(ep->model->doorbell_ns);
}

// EFA's first WRITE from a NIC into a remote region sets up what later ones
// reuse (its handshake with the peer, an address handle): charged once per
// (endpoint, remote region and key). Under post_lock.
void FirstContact(Endpoint* ep, const Descriptor& d, ThreadCharge& charge) {
  if (d.kind != OpKind::kWrite || ep->model->first_contact_ns == 0) return;
  for (const auto& seen : ep->contacted) {
    if (seen.first == d.peer && seen.second == d.key) return;
  }
  if (ep->contacted.size() >= 4096) ep->contacted.clear();  // a long-lived server's old clients
  ep->contacted.emplace_back(d.peer, d.key);
  charge.Local(ep->model->first_contact_ns);
}

// The local buffer must lie in the registration its descriptor names
// (FI_MR_LOCAL, as EFA checks an lkey), registered with the access the
// operation needs (FI_SEND, FI_RECV or FI_WRITE; EFA maps them to the
// device's local access rights in efa_mr.c).
bool LocalOk(const void* buf, size_t len, void* desc, uint64_t access) {
  if (len == 0) return true;
  auto* mr = static_cast<const MemoryRegion*>(desc);
  if (mr == nullptr) return false;
  if ((mr->access & access) != access) return false;
  uint64_t start = reinterpret_cast<uint64_t>(buf);
  return start >= mr->addr && len <= mr->len && start - mr->addr <= mr->len - len;
}

PeerRegion* Resolve(const Endpoint* ep, fi_addr_t addr) {
  if (ep->av == nullptr || addr >= AddressVector::kCapacity) return nullptr;
  return ep->av->lookup[addr].load(std::memory_order_acquire);
}

// Writes the descriptor into the submit ring; without FI_MORE, rings the
// doorbell, which publishes everything written so far (EFA holds FI_MORE
// posts on the host until then).
ssize_t Post(Endpoint* ep, const Descriptor& d, uint64_t flags) {
  const Model& m = *ep->model;
  ThreadCharge charge(m, ep->nic_node);
  // FI_THREAD_SAFE; FI_THREAD_DOMAIN takes none. Held by another thread
  // for long: -FI_EAGAIN, as a full queue.
  CallLock lock(ep->locked ? &ep->post_lock : nullptr, charge);
  if (!lock.held()) return -FI_EAGAIN;
  if (!ep->enabled) return -FI_EOPBADSTATE;
  bool rx = d.kind == OpKind::kRecv;
  std::atomic<int64_t>& used = rx ? ep->credits->rx : ep->credits->tx;
  size_t depth = rx ? m.rx_depth : m.tx_depth;
  if (static_cast<size_t>(used.load(std::memory_order_relaxed)) >= depth) return -FI_EAGAIN;
  used.fetch_add(1, std::memory_order_relaxed);
  ep->submit[ep->produced & ep->submit_mask] = d;
  ++ep->produced;
  // The software path: building the work request and the descriptor, in
  // the caller's cache whichever socket it runs on.
  charge.Local(m.post_ns);
  FirstContact(ep, d, charge);
  if (!(flags & FI_MORE)) {
    ep->published.store(ep->produced, std::memory_order_release);
    RingDoorbell(ep, charge);
    Engine::WakeNappers();
  }
  return 0;
}

ssize_t PostTransmit(Endpoint* ep, OpKind kind, const void* buf, size_t len, void* desc,
                     fi_addr_t dest, uint64_t remote_addr, uint64_t key, uint64_t data,
                     void* context, uint64_t flags) {
  const Model& m = *ep->model;
  if (kind == OpKind::kSend && len > (m.direct ? m.mtu : m.max_send)) return -FI_EMSGSIZE;
  if (!LocalOk(buf, len, desc, kind == OpKind::kSend ? FI_SEND : FI_WRITE)) return -FI_EINVAL;
  PeerRegion* peer = Resolve(ep, dest);
  if (peer == nullptr) return -FI_EINVAL;
  Descriptor d{};
  d.context = context;
  d.buf = static_cast<uint8_t*>(const_cast<void*>(buf));
  d.length = len;
  d.remote_addr = remote_addr;
  d.key = key;
  d.data = data;
  d.peer = peer;
  d.kind = kind;
  d.completion = !ep->tx_selective || (flags & FI_COMPLETION);
  d.has_data = (flags & FI_REMOTE_CQ_DATA) != 0;
  return Post(ep, d, flags);
}

ssize_t PostRecv(Endpoint* ep, void* buf, size_t len, void* desc, void* context, uint64_t flags) {
  if (!LocalOk(buf, len, desc, FI_RECV)) return -FI_EINVAL;
  Descriptor d{};
  d.context = context;
  d.buf = static_cast<uint8_t*>(buf);
  d.length = len;
  d.kind = OpKind::kRecv;
  d.completion = !ep->rx_selective || (flags & FI_COMPLETION);
  return Post(ep, d, flags);
}

ssize_t Recv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t, void* context) {
  return PostRecv(EpOf(f), buf, len, desc, context, FI_COMPLETION);
}

ssize_t RecvMsg(fid_ep* f, const fi_msg* msg, uint64_t flags) {
  if (msg->iov_count > 1) return -FI_EINVAL;
  void* buf = msg->iov_count ? msg->msg_iov[0].iov_base : nullptr;
  size_t len = msg->iov_count ? msg->msg_iov[0].iov_len : 0;
  void* desc = msg->iov_count && msg->desc ? msg->desc[0] : nullptr;
  return PostRecv(EpOf(f), buf, len, desc, msg->context, flags);
}

ssize_t RecvV(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t src,
              void* context) {
  fi_msg msg{iov, desc, count, src, context, 0};
  return RecvMsg(f, &msg, FI_COMPLETION);
}

ssize_t Send(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, void* context) {
  Endpoint* ep = EpOf(f);
  return PostTransmit(ep, OpKind::kSend, buf, len, desc, dest, 0, 0, 0, context, ep->tx_op_flags);
}

ssize_t SendData(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                 void* context) {
  Endpoint* ep = EpOf(f);
  return PostTransmit(ep, OpKind::kSend, buf, len, desc, dest, 0, 0, data, context,
                      ep->tx_op_flags | FI_REMOTE_CQ_DATA);
}

ssize_t SendMsg(fid_ep* f, const fi_msg* msg, uint64_t flags) {
  if (msg->iov_count > 1) return -FI_EINVAL;
  const void* buf = msg->iov_count ? msg->msg_iov[0].iov_base : nullptr;
  size_t len = msg->iov_count ? msg->msg_iov[0].iov_len : 0;
  void* desc = msg->iov_count && msg->desc ? msg->desc[0] : nullptr;
  return PostTransmit(EpOf(f), OpKind::kSend, buf, len, desc, msg->addr, 0, 0, msg->data,
                      msg->context, flags);
}

ssize_t SendV(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
              void* context) {
  fi_msg msg{iov, desc, count, dest, context, 0};
  return SendMsg(f, &msg, EpOf(f)->tx_op_flags);
}

ssize_t Write(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr,
              uint64_t key, void* context) {
  Endpoint* ep = EpOf(f);
  return PostTransmit(ep, OpKind::kWrite, buf, len, desc, dest, addr, key, 0, context,
                      ep->tx_op_flags);
}

ssize_t WriteData(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                  uint64_t addr, uint64_t key, void* context) {
  Endpoint* ep = EpOf(f);
  return PostTransmit(ep, OpKind::kWrite, buf, len, desc, dest, addr, key, data, context,
                      ep->tx_op_flags | FI_REMOTE_CQ_DATA);
}

ssize_t WriteMsg(fid_ep* f, const fi_msg_rma* msg, uint64_t flags) {
  if (msg->iov_count > 1 || msg->rma_iov_count != 1) return -FI_EINVAL;
  const void* buf = msg->iov_count ? msg->msg_iov[0].iov_base : nullptr;
  size_t len = msg->iov_count ? msg->msg_iov[0].iov_len : 0;
  void* desc = msg->iov_count && msg->desc ? msg->desc[0] : nullptr;
  if (len > msg->rma_iov[0].len) return -FI_EINVAL;
  return PostTransmit(EpOf(f), OpKind::kWrite, buf, len, desc, msg->addr, msg->rma_iov[0].addr,
                      msg->rma_iov[0].key, msg->data, msg->context, flags);
}

ssize_t WriteV(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
               uint64_t addr, uint64_t key, void* context) {
  if (count != 1) return -FI_EINVAL;
  return Write(f, iov[0].iov_base, iov[0].iov_len, desc ? desc[0] : nullptr, dest, addr, key,
               context);
}

// ---------------------------------------------------------------------------
// Endpoint: set-up

int GetName(fid_t f, void* addr, size_t* addrlen) {
  Endpoint* ep = reinterpret_cast<Endpoint*>(f);
  if (addr == nullptr || *addrlen < sizeof(Address)) {
    *addrlen = sizeof(Address);
    return -FI_ETOOSMALL;
  }
  std::memcpy(addr, &ep->address, sizeof(Address));
  *addrlen = sizeof(Address);
  return 0;
}

int EpBind(fid* f, fid* bfid, uint64_t flags) {
  Endpoint* ep = reinterpret_cast<Endpoint*>(f);
  if (ep->enabled) return -FI_EOPBADSTATE;
  switch (bfid->fclass) {
    case FI_CLASS_CQ: {
      auto* cq = reinterpret_cast<CompletionQueue*>(bfid);
      if (cq->domain != ep->domain) return -FI_EINVAL;
      if (flags & FI_TRANSMIT) {
        if (ep->tx_cq) return -FI_EINVAL;
        ep->tx_cq = cq;
        ep->tx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
        cq->bound_endpoints.fetch_add(1);
      }
      if (flags & FI_RECV) {
        if (ep->rx_cq) return -FI_EINVAL;
        ep->rx_cq = cq;
        ep->rx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
        cq->bound_endpoints.fetch_add(1);
      }
      return 0;
    }
    case FI_CLASS_AV: {
      auto* av = reinterpret_cast<AddressVector*>(bfid);
      if (av->domain != ep->domain || ep->av) return -FI_EINVAL;
      ep->av = av;
      av->bound_endpoints.fetch_add(1);
      return 0;
    }
    case FI_CLASS_EQ: {
      ep->eq = reinterpret_cast<EventQueue*>(bfid);
      // Errors injected before the queue was first bound are not its own.
      size_t appearances = 0;
      {
        std::lock_guard<std::mutex> injections(Injections().mutex);
        appearances = Injections().domains.size();
      }
      std::lock_guard<std::mutex> lock(ep->eq->mutex);
      if (ep->eq->domain < 0) ep->eq->injections_seen = appearances;
      ep->eq->domain = ep->domain->index;
      return 0;
    }
    default:
      return -FI_ENOSYS;
  }
}

int EpControl(fid* f, int command, void* arg) {
  Endpoint* ep = reinterpret_cast<Endpoint*>(f);
  switch (command) {
    case FI_ENABLE:
      if (ep->enabled) return 0;
      if (ep->tx_cq == nullptr || ep->rx_cq == nullptr) return -FI_ENOCQ;
      if (ep->av == nullptr) return -FI_ENOAV;
      // EFA abort()s on errors of its internal operations when no event
      // queue is bound (efa_base_ep.c, efa_base_ep_write_eq_error); simnic
      // refuses such an endpoint at once, so the mistake shows in a test.
      if (ep->eq == nullptr) return -FI_ENOEQ;
      ep->enabled = true;
      Engine::Get().Add(ep);
      return 0;
    case FI_GETOPSFLAG:
      if (arg == nullptr) return -FI_EINVAL;
      *static_cast<uint64_t*>(arg) = ep->tx_op_flags;
      return 0;
    case FI_SETOPSFLAG:
      if (arg == nullptr) return -FI_EINVAL;
      ep->tx_op_flags = *static_cast<uint64_t*>(arg);
      return 0;
    default:
      return -FI_ENOSYS;
  }
}

int EpClose(fid* f) {
  Endpoint* ep = reinterpret_cast<Endpoint*>(f);
  bool was_enabled = ep->enabled;
  if (was_enabled && !Engine::Get().Remove(ep)) {
    // Its engine thread got no core for seconds: keep the endpoint (and its
    // region) rather than free what that thread may still read.
    std::fprintf(stderr, "simnic: NIC simnic%d: engine busy at close; endpoint kept\n",
                 ep->domain->index);
    return 0;
  }
  if (const char* report = std::getenv("SIMNIC_REPORT"); report != nullptr && *report) {
    // For the tools: did the engine keep up with the line (nic.h, kLateNs)?
    // One line per endpoint, appended whole (O_APPEND) by every process.
    char line[256];
    int n = std::snprintf(line, sizeof(line),
                          "simnic-report pid=%d nic=%d transmits=%llu late=%llu doorbells=%llu "
                          "remote_doorbells=%llu\n",
                          static_cast<int>(getpid()), ep->domain->index,
                          static_cast<unsigned long long>(ep->transmits),
                          static_cast<unsigned long long>(ep->late_transmits),
                          static_cast<unsigned long long>(ep->doorbells),
                          static_cast<unsigned long long>(ep->remote_doorbells));
    int fd = open(report, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t written = write(fd, line, static_cast<size_t>(n));
      (void)written;  // a report is best effort
      close(fd);
    }
  }
  if (std::getenv("SIMNIC_STATS") != nullptr) {
    // What the chapters cannot count themselves: where the doorbells came
    // from (an unpinned thread that drifts to the other node pays more),
    // and what an endpoint closed in the middle of a transfer still held.
    if (ep->doorbells > 0) {
      std::fprintf(stderr,
                   "simnic: NIC simnic%d (virtual NUMA node %d): %llu doorbell(s), %llu from "
                   "another virtual NUMA node\n",
                   ep->domain->index, ep->nic_node, static_cast<unsigned long long>(ep->doorbells),
                   static_cast<unsigned long long>(ep->remote_doorbells));
    }
    std::string left = was_enabled ? DescribeUnfinished(ep) : "";
    if (!left.empty()) {
      std::fprintf(stderr, "simnic: NIC simnic%d closed with work left:%s\n", ep->domain->index,
                   left.c_str());
    }
  }
  ReleaseConnections(ep);
  DestroyRegion(ep);
  if (ep->tx_cq) ep->tx_cq->bound_endpoints.fetch_sub(1);
  if (ep->rx_cq) ep->rx_cq->bound_endpoints.fetch_sub(1);
  if (ep->av) ep->av->bound_endpoints.fetch_sub(1);
  ep->domain->refs.fetch_sub(1);
  delete ep;
  return 0;
}

ssize_t Cancel(fid_t, void*) { return -FI_ENOENT; }
int GetOpt(fid_t, int, int, void*, size_t*) { return -FI_ENOPROTOOPT; }
int SetOpt(fid_t, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; }
ssize_t RxSizeLeft(fid_ep* f) {
  Endpoint* ep = EpOf(f);
  return static_cast<ssize_t>(ep->model->rx_depth) - ep->credits->rx.load();
}
ssize_t TxSizeLeft(fid_ep* f) {
  Endpoint* ep = EpOf(f);
  return static_cast<ssize_t>(ep->model->tx_depth) - ep->credits->tx.load();
}

fi_ops ep_fid_ops = {
    kFiOpsSize, EpClose, EpBind, EpControl, NoSys<int, fid*, const char*, uint64_t, void**, void*>,
    nullptr,    nullptr};
fi_ops_ep ep_ops = {sizeof(fi_ops_ep),
                    Cancel,
                    GetOpt,
                    SetOpt,
                    NoSys<int, fid_ep*, int, fi_tx_attr*, fid_ep**, void*>,
                    NoSys<int, fid_ep*, int, fi_rx_attr*, fid_ep**, void*>,
                    RxSizeLeft,
                    TxSizeLeft};
// No fi_setname: EFA has none (fi_no_setname); an endpoint's address is
// its own and a new endpoint gets a new one.
fi_ops_cm cm_ops = {sizeof(fi_ops_cm),
                    NoSys<int, fid_t, void*, size_t>,
                    GetName,
                    NoSys<int, fid_ep*, void*, size_t*>,
                    NoSys<int, fid_ep*, const void*, const void*, size_t>,
                    NoSys<int, fid_pep*>,
                    NoSys<int, fid_ep*, const void*, size_t>,
                    NoSys<int, fid_pep*, fid_t, const void*, size_t>,
                    NoSys<int, fid_ep*, uint64_t>,
                    NoSys<int, fid_ep*, const void*, uint64_t, fid_mc**, void*>};
fi_ops_msg msg_ops = {sizeof(fi_ops_msg),
                      Recv,
                      RecvV,
                      RecvMsg,
                      Send,
                      SendV,
                      SendMsg,
                      NoSys<ssize_t, fid_ep*, const void*, size_t, fi_addr_t>,
                      SendData,
                      NoSys<ssize_t, fid_ep*, const void*, size_t, uint64_t, fi_addr_t>};
fi_ops_rma rma_ops = {
    sizeof(fi_ops_rma),
    NoSys<ssize_t, fid_ep*, void*, size_t, void*, fi_addr_t, uint64_t, uint64_t, void*>,
    NoSys<ssize_t, fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, uint64_t, void*>,
    NoSys<ssize_t, fid_ep*, const fi_msg_rma*, uint64_t>,
    Write,
    WriteV,
    WriteMsg,
    NoSys<ssize_t, fid_ep*, const void*, size_t, fi_addr_t, uint64_t, uint64_t>,
    WriteData,
    NoSys<ssize_t, fid_ep*, const void*, size_t, uint64_t, fi_addr_t, uint64_t, uint64_t>};
fi_ops_tagged tagged_ops = {
    sizeof(fi_ops_tagged),
    NoSys<ssize_t, fid_ep*, void*, size_t, void*, fi_addr_t, uint64_t, uint64_t, void*>,
    NoSys<ssize_t, fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, uint64_t, void*>,
    NoSys<ssize_t, fid_ep*, const fi_msg_tagged*, uint64_t>,
    NoSys<ssize_t, fid_ep*, const void*, size_t, void*, fi_addr_t, uint64_t, void*>,
    NoSys<ssize_t, fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, void*>,
    NoSys<ssize_t, fid_ep*, const fi_msg_tagged*, uint64_t>,
    NoSys<ssize_t, fid_ep*, const void*, size_t, fi_addr_t, uint64_t>,
    NoSys<ssize_t, fid_ep*, const void*, size_t, void*, uint64_t, fi_addr_t, uint64_t, void*>,
    NoSys<ssize_t, fid_ep*, const void*, size_t, uint64_t, fi_addr_t, uint64_t>};

int EndpointOpen(fid_domain* d, fi_info* info, fid_ep** out, void* context) {
  Domain* domain = reinterpret_cast<Domain*>(d);
  if (info == nullptr || (info->ep_attr && info->ep_attr->type != FI_EP_RDM)) return -FI_EINVAL;
  auto* ep = new Endpoint();
  ep->ep.fid.fclass = FI_CLASS_EP;
  ep->ep.fid.context = context;
  ep->ep.fid.ops = &ep_fid_ops;
  ep->ep.ops = &ep_ops;
  ep->ep.cm = &cm_ops;
  ep->ep.msg = &msg_ops;
  ep->ep.rma = &rma_ops;
  ep->ep.tagged = &tagged_ops;
  ep->ep.atomic = nullptr;
  ep->ep.collective = nullptr;
  ep->domain = domain;
  ep->model = domain->model;
  ep->locked = domain->locked;
  ep->nic_node = domain->nic_node;
  if (info->tx_attr && info->tx_attr->op_flags) ep->tx_op_flags = info->tx_attr->op_flags;
  ep->credits = NewCredits();
  size_t capacity = 1;
  while (capacity < ep->model->tx_depth + ep->model->rx_depth) capacity <<= 1;
  ep->submit.resize(capacity);
  ep->submit_mask = capacity - 1;
  std::string error;
  if (!CreateRegion(ep, &error)) {
    std::fprintf(stderr, "simnic: cannot open an endpoint: %s\n", error.c_str());
    delete ep;
    return -FI_ENOMEM;
  }
  domain->refs.fetch_add(1);
  *out = &ep->ep;
  return 0;
}

// ---------------------------------------------------------------------------
// Domain and fabric

int DomainClose(fid* f) {
  Domain* domain = reinterpret_cast<Domain*>(f);
  if (domain->refs.load() > 0) return -FI_EBUSY;
  domain->fabric->domains.fetch_sub(1);
  delete domain;
  return 0;
}

fi_ops domain_fid_ops = {kFiOpsSize,
                         DomainClose,
                         NoSys<int, fid*, fid*, uint64_t>,
                         NoSys<int, fid*, int, void*>,
                         NoSys<int, fid*, const char*, uint64_t, void**, void*>,
                         nullptr,
                         nullptr};
fi_ops_domain domain_ops = {
    offsetof(fi_ops_domain, endpoint2),
    AvOpen,
    CqOpen,
    EndpointOpen,
    NoSys<int, fid_domain*, fi_info*, fid_ep**, void*>,
    NoSys<int, fid_domain*, fi_cntr_attr*, fid_cntr**, void*>,
    NoSys<int, fid_domain*, fi_poll_attr*, fid_poll**>,
    NoSys<int, fid_domain*, fi_tx_attr*, fid_stx**, void*>,
    NoSys<int, fid_domain*, fi_rx_attr*, fid_ep**, void*>,
    NoSys<int, fid_domain*, fi_datatype, fi_op, fi_atomic_attr*, uint64_t>,
    NoSys<int, fid_domain*, fi_collective_op, fi_collective_attr*, uint64_t>,
    nullptr};

void PrintModelOnce(const Model& m) {
  static std::once_flag once;
  std::call_once(once, [&m] {
    if (std::getenv("SIMNIC_QUIET") == nullptr) std::fprintf(stderr, "%s\n", m.Summary().c_str());
  });
}

int DomainOpen(fid_fabric* fab, fi_info* info, fid_domain** out, void* context) {
  if (info == nullptr || info->domain_attr == nullptr || info->domain_attr->name == nullptr ||
      std::strncmp(info->domain_attr->name, "simnic", 6) != 0)
    return -FI_EINVAL;
  const Model& m = GetModel();
  int index = std::atoi(info->domain_attr->name + 6);
  if (index < 0 || index >= m.nics) return -FI_EINVAL;
  if ((info->domain_attr->mr_mode & kRequiredMrMode) != kRequiredMrMode) return -FI_EINVAL;
  PrintModelOnce(m);
  auto* domain = new Domain();
  domain->domain.fid.fclass = FI_CLASS_DOMAIN;
  domain->domain.fid.context = context;
  domain->domain.fid.ops = &domain_fid_ops;
  domain->domain.ops = &domain_ops;
  domain->domain.mr = &mr_ops;
  domain->fabric = reinterpret_cast<Fabric*>(fab);
  domain->index = index;
  domain->model = &m;
  domain->locked = info->domain_attr->threading != FI_THREAD_DOMAIN;
  domain->hmem = (info->caps & FI_HMEM) != 0;
  domain->api_version = fab->api_version;
  domain->nic_node = NodeOfNic(index, m.nics, m.numa_nodes, m.nics_per_group);
  domain->fabric->domains.fetch_add(1);
  *out = &domain->domain;
  return 0;
}

int FabricClose(fid* f) {
  Fabric* fabric = reinterpret_cast<Fabric*>(f);
  if (fabric->domains.load() > 0) return -FI_EBUSY;
  delete fabric;
  return 0;
}

fi_ops fabric_fid_ops = {kFiOpsSize,
                         FabricClose,
                         NoSys<int, fid*, fid*, uint64_t>,
                         NoSys<int, fid*, int, void*>,
                         NoSys<int, fid*, const char*, uint64_t, void**, void*>,
                         nullptr,
                         nullptr};
fi_ops_fabric fabric_ops = {offsetof(fi_ops_fabric, domain2),
                            DomainOpen,
                            NoSys<int, fid_fabric*, fi_info*, fid_pep**, void*>,
                            EqOpen,
                            NoSys<int, fid_fabric*, fi_wait_attr*, fid_wait**>,
                            NoSys<int, fid_fabric*, fid**, int>,
                            nullptr};

int FabricOpen(fi_fabric_attr* attr, fid_fabric** out, void* context) {
  if (attr == nullptr || attr->name == nullptr || std::strcmp(attr->name, "simnic") != 0)
    return -FI_ENODATA;
  auto* fabric = new Fabric();
  fabric->fabric.fid.fclass = FI_CLASS_FABRIC;
  fabric->fabric.fid.context = context;
  fabric->fabric.fid.ops = &fabric_fid_ops;
  fabric->fabric.ops = &fabric_ops;
  *out = &fabric->fabric;
  return 0;
}

void Cleanup() {
  if (Engine::Created()) Engine::Get().StopAll();
}

fi_provider provider = {
    kProviderVersion, FI_VERSION(1, 17), {}, "simnic", GetInfo, FabricOpen, Cleanup,
};

}  // namespace
}  // namespace simnic

// The entry point libfabric looks up in lib<name>-fi.so (FI_EXT_INI).
extern "C" __attribute__((visibility("default"))) fi_provider* fi_prov_ini(void) {
  // Speak the loading core's API version: the core skips a provider whose
  // fi_version is older than what the application asks for (fi_getinfo in
  // src/fabric.c), and the application asks up to the core's version.
  simnic::provider.fi_version = fi_version();
  return &simnic::provider;
}
