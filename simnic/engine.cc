// The data path: inbound regions, peer mappings, memory keys, and the engine
// threads that move every payload. See nic.h for the picture.
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "simnic/nic.h"

namespace simnic {

// One initiator endpoint's claim on one target's inbound ring.
struct InFlight {
  uint64_t entry_pos;  // where its header is
  uint64_t end;        // the ring position after it
  bool last;           // the operation's last fragment: completes it
  Descriptor op;       // valid when `last`
};

struct Connection {
  std::shared_ptr<PeerRegion> peer;
  int slot = -1;
  RingControl* control = nullptr;
  uint8_t* ring = nullptr;
  uint64_t ring_bytes = 0;
  uint64_t head = 0;       // bytes written into the ring
  uint64_t completed = 0;  // bytes whose status has been read
  std::deque<InFlight> in_flight;
  uint16_t op_status = kOk;  // the first error among the current op's fragments
  uint16_t failed = kOk;     // set for good: no ring, or the peer is gone
  uint64_t claim_deadline_ns = 0;
  bool busy = false;  // listed in Endpoint::busy
};

namespace {

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

// The network writing application memory. Repeats of one page arrive on
// several NICs, so two engine threads may write the same bytes at once, as
// two NICs' DMA would; the application orders its reads through the CQ.
// ThreadSanitizer is told not to count these writes (they are the NIC's).
void CopyIntoRegisteredMemory(void* to, const void* from, size_t length) {
#if defined(__SANITIZE_THREAD__)
  __tsan_ignore_thread_begin();
#endif
  std::memcpy(to, from, length);
#if defined(__SANITIZE_THREAD__)
  __tsan_ignore_thread_end();
#endif
}

constexpr size_t kPage = 4096;
constexpr size_t kMaxUnexpected = 4096;
constexpr size_t kMaxUnexpectedBytes = 64u << 20;
constexpr int kInboundBudget = 256;  // entries per ring per pass
constexpr uint64_t kClaimTimeoutNs = 2000000000ull;

uint64_t RoundUp64(uint64_t n) { return (n + 63) & ~uint64_t{63}; }

uint64_t RandomToken() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = [] {
    uint64_t s = 0;
    if (getrandom(&s, sizeof(s), 0) != sizeof(s)) s = NowNs() ^ (uint64_t(getpid()) << 40);
    return s;
  }();
  // splitmix64 of a counter: distinct within the process, random across.
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (counter.fetch_add(1) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z == 0 ? 1 : z;
}

size_t SlotStride(uint64_t ring_bytes) { return kPage + ring_bytes; }

int ErrorOf(uint16_t status) {
  switch (status) {
    case kOk:
      return 0;
    case kRemoteAccess:
      return FI_EACCES;
    case kCqDataTooLarge:
      return FI_EINVAL;
    case kTruncated:
      return FI_ETRUNC;
    case kCanceled:
      return FI_ECANCELED;
    default:
      return FI_EIO;
  }
}

void FreeSlot(RingControl* rc) {
  rc->head.store(0, std::memory_order_relaxed);
  rc->tail.store(0, std::memory_order_relaxed);
  rc->owner_pid.store(0, std::memory_order_relaxed);
  rc->state.store(kRingFree, std::memory_order_relaxed);
  rc->owner.store(0, std::memory_order_release);
}

bool ProcessGone(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

bool TakeCanceledSend() {
  static std::atomic<long> left{[] {
    const char* n = std::getenv("SIMNIC_CANCEL_SENDS");
    return n != nullptr ? std::atol(n) : 0L;
  }()};
  if (left.load(std::memory_order_relaxed) <= 0) return false;
  return left.fetch_sub(1, std::memory_order_relaxed) > 0;
}

// Completes a transmit (write or send) towards the application. False when
// the CQ is full: the caller keeps the operation and tries again.
bool CompleteTransmit(Endpoint* ep, const Descriptor& op, uint16_t status) {
  bool report = op.completion || status != kOk;
  if (!report) {
    ep->credits->tx.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
  CompletionQueue* cq = ep->tx_cq;
  if (!cq->HasSpace()) return false;
  CqEntry e{};
  e.op_context = op.context;
  e.flags = op.kind == OpKind::kWrite ? (FI_RMA | FI_WRITE) : (FI_MSG | FI_SEND);
  e.err = ErrorOf(status);
  e.prov_errno = status;
  e.credits = ep->credits;
  e.credit = kTxCredit;
  cq->Push(e);
  return true;
}

bool CompleteRecv(Endpoint* ep, const Descriptor& recv, const uint8_t* payload, uint64_t length,
                  uint64_t data) {
  CompletionQueue* cq = ep->rx_cq;
  bool report = recv.completion || length > recv.length;
  if (report && !cq->HasSpace()) return false;
  uint64_t copied = std::min(length, recv.length);
  if (copied > 0) std::memcpy(recv.buf, payload, copied);
  if (!report) {
    ep->credits->rx.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
  CqEntry e{};
  e.op_context = recv.context;
  e.flags = FI_MSG | FI_RECV;
  e.len = copied;
  e.buf = recv.buf;
  e.data = data;
  if (length > recv.length) {
    e.err = FI_ETRUNC;
    e.prov_errno = kTruncated;
    e.olen = length - recv.length;
  }
  e.credits = ep->credits;
  e.credit = kRxCredit;
  cq->Push(e);
  return true;
}

// Takes what the doorbell published: receives join the posted list,
// transmits get their place on the wire (the line-rate model).
bool PullSubmissions(Endpoint* ep, uint64_t now) {
  uint64_t published = ep->published.load(std::memory_order_acquire);
  uint64_t consumed = ep->consumed.load(std::memory_order_relaxed);
  if (consumed == published) return false;
  const double ns_per_byte = 8e9 / ep->model->line_bps();
  for (; consumed < published; ++consumed) {
    const Descriptor& d = ep->submit[consumed & ep->submit_mask];
    if (d.kind == OpKind::kRecv) {
      ep->posted_recvs.push_back(d);
      continue;
    }
    WireOp w{d, 0};
    if (d.kind == OpKind::kWrite && d.has_data && d.data > UINT32_MAX) {
      w.error = kCqDataTooLarge;  // EFA's CQ data is 4 bytes
      w.finish_ns = static_cast<double>(now);
    } else {
      double start = std::max(ep->wire_free_ns, static_cast<double>(now));
      w.finish_ns = start + static_cast<double>(d.length) * ns_per_byte;
      ep->wire_free_ns = w.finish_ns;
    }
    ep->wire.push_back(w);
  }
  ep->consumed.store(consumed, std::memory_order_release);
  return true;
}

Connection* GetConnection(Endpoint* ep, PeerRegion* peer, uint64_t now) {
  auto it = ep->connections.find(peer);
  Connection* c = nullptr;
  if (it == ep->connections.end()) {
    auto owned = std::make_unique<Connection>();
    c = owned.get();
    c->peer = peer->shared_from_this();
    c->claim_deadline_ns = now + kClaimTimeoutNs;
    c->ring_bytes = peer->ring_bytes();
    ep->connections.emplace(peer, std::move(owned));
  } else {
    c = it->second.get();
  }
  if (c->slot >= 0 || c->failed != kOk) return c;
  if (peer->gone()) {
    c->failed = kPeerGone;
    return c;
  }
  uint64_t token = RandomToken();
  for (uint32_t s = 0; s < peer->slots(); ++s) {
    RingControl* rc = peer->control(static_cast<int>(s));
    uint64_t expected = 0;
    if (!rc->owner.compare_exchange_strong(expected, token, std::memory_order_acquire)) continue;
    rc->owner_pid.store(static_cast<uint32_t>(getpid()), std::memory_order_relaxed);
    std::memcpy(rc->initiator, &ep->address, sizeof(Address));
    rc->state.store(kRingReady, std::memory_order_release);
    c->slot = static_cast<int>(s);
    c->control = rc;
    c->ring = peer->ring(static_cast<int>(s));
    return c;
  }
  if (now > c->claim_deadline_ns) {
    c->failed = kNoRing;
    return c;
  }
  return nullptr;  // every ring taken: try again later
}

// Copies the operation (what is left of it) into the ring. False when the
// ring is full; `w.sent` says how far it got.
bool WriteEntries(Endpoint* ep, Connection* c, WireOp& w) {
  const uint64_t rb = c->ring_bytes;
  bool first = true;
  while (first || w.sent < w.op.length) {
    first = false;
    uint64_t fragment =
        w.op.kind == OpKind::kSend ? w.op.length : std::min(kMaxFragment, w.op.length - w.sent);
    uint64_t bytes = kEntryPayloadOffset + RoundUp64(fragment);
    uint64_t pos = c->head % rb;
    uint64_t pad = bytes > rb - pos ? rb - pos : 0;
    if (c->head + pad + bytes - c->completed > rb) return false;
    if (pad > 0) {
      auto* p = reinterpret_cast<EntryHeader*>(c->ring + pos);
      *p = EntryHeader{};
      p->bytes = static_cast<uint32_t>(pad);
      p->kind = kEntryPad;
      c->head += pad;
    }
    uint64_t entry_pos = c->head;
    auto* e = reinterpret_cast<EntryHeader*>(c->ring + entry_pos % rb);
    bool last = w.sent + fragment == w.op.length;
    e->bytes = static_cast<uint32_t>(bytes);
    e->kind = w.op.kind == OpKind::kSend ? kEntrySend : kEntryWrite;
    e->flags = (last ? kEntryLast : 0) | (w.op.has_data ? kEntryCqData : 0);
    e->status = kOk;
    e->length = static_cast<uint32_t>(fragment);
    e->cq_data = static_cast<uint32_t>(w.op.data);
    e->remote_addr = w.op.remote_addr + w.sent;
    e->key = w.op.key;
    e->total = w.op.length;
    if (fragment > 0) {
      std::memcpy(reinterpret_cast<uint8_t*>(e) + kEntryPayloadOffset, w.op.buf + w.sent, fragment);
    }
    c->head += bytes;
    c->in_flight.push_back(InFlight{entry_pos, c->head, last, last ? w.op : Descriptor{}});
    w.sent += fragment;
    c->control->head.store(c->head, std::memory_order_release);
    if (!c->busy) {
      c->busy = true;
      ep->busy.push_back(c);
    }
  }
  return true;
}

bool Transmit(Endpoint* ep, uint64_t now) {
  bool work = false;
  while (!ep->wire.empty()) {
    WireOp& w = ep->wire.front();
    if (w.finish_ns > static_cast<double>(now)) break;
    if (w.error == kOk && w.op.kind == OpKind::kSend && TakeCanceledSend()) w.error = kCanceled;
    if (w.error == kOk) {
      Connection* c = GetConnection(ep, w.op.peer, now);
      if (c == nullptr) break;  // waiting for a free ring at the target
      if (c->failed != kOk) {
        w.error = c->failed;
      } else {
        if (!WriteEntries(ep, c, w)) break;  // ring full: the NIC's queue waits
        ++ep->transmits;
        if (static_cast<double>(now) > w.finish_ns + Endpoint::kLateNs) ++ep->late_transmits;
        ep->wire.pop_front();
        work = true;
        continue;
      }
    }
    if (!CompleteTransmit(ep, w.op, w.error)) break;
    ep->wire.pop_front();
    work = true;
  }
  return work;
}

// Completes what the targets have consumed, in order per connection.
bool Reap(Endpoint* ep) {
  bool work = false;
  for (size_t i = 0; i < ep->busy.size();) {
    Connection* c = ep->busy[i];
    bool gone = c->failed != kOk;
    uint64_t tail = gone ? 0 : c->control->tail.load(std::memory_order_acquire);
    while (!c->in_flight.empty()) {
      InFlight& f = c->in_flight.front();
      uint16_t status = kPeerGone;
      if (!gone) {
        if (f.end > tail) break;
        status = reinterpret_cast<EntryHeader*>(c->ring + f.entry_pos % c->ring_bytes)->status;
      }
      if (status != kOk && c->op_status == kOk) c->op_status = status;
      if (f.last) {
        if (!CompleteTransmit(ep, f.op, c->op_status)) break;
        c->op_status = kOk;
      }
      c->completed = f.end;
      c->in_flight.pop_front();
      work = true;
    }
    if (c->in_flight.empty()) {
      c->busy = false;
      ep->busy[i] = ep->busy.back();
      ep->busy.pop_back();
    } else {
      ++i;
    }
  }
  return work;
}

bool KnownPeer(Endpoint* ep, InboundState& in, const RingControl* rc) {
  uint64_t generation = ep->av->generation.load(std::memory_order_acquire);
  if (in.av_generation != generation) {
    AddressBytes initiator;
    std::memcpy(initiator.data(), rc->initiator, initiator.size());
    std::lock_guard<std::mutex> lock(ep->av->mutex);
    in.known = ep->av->known.count(initiator) > 0;
    in.av_generation = generation;
  }
  return in.known;
}

// Handles one inbound entry. False when it must wait (a full CQ, or no room
// for a message nobody has posted a receive for yet).
bool Deliver(Endpoint* ep, InboundState& in, const RingControl* rc, EntryHeader* e) {
  if (e->kind == kEntryPad) return true;
  const uint8_t* payload = reinterpret_cast<const uint8_t*>(e) + kEntryPayloadOffset;
  bool unknown = ep->model->direct && !KnownPeer(ep, in, rc);
  if (e->kind == kEntryWrite) {
    if (unknown) {
      e->status = kUnknownPeer;
      return true;
    }
    bool report = (e->flags & kEntryLast) && (e->flags & kEntryCqData);
    if (report && !ep->rx_cq->HasSpace()) return false;
    if (!ep->domain->keys.Check(e->key, e->remote_addr, e->length, FI_REMOTE_WRITE)) {
      e->status = kRemoteAccess;
      return true;
    }
    if (e->length > 0) {
      CopyIntoRegisteredMemory(reinterpret_cast<void*>(static_cast<uintptr_t>(e->remote_addr)),
                               payload, e->length);
    }
    e->status = kOk;
    if (report) {
      CqEntry c{};
      // Like the efa fabric, leave something stale in op_context: a remote
      // write is told by its flags, never by a null context.
      c.op_context = kStaleRemoteWriteContext;
      c.flags = FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA;
      c.len = e->total;
      c.data = e->cq_data;
      ep->rx_cq->Push(c);
    }
    return true;
  }
  // A message.
  if (unknown) {
    e->status = kUnknownPeer;
    return true;
  }
  uint64_t data = (e->flags & kEntryCqData) ? e->cq_data : 0;
  if (ep->unexpected.empty() && !ep->posted_recvs.empty()) {
    if (!CompleteRecv(ep, ep->posted_recvs.front(), payload, e->length, data)) return false;
    ep->posted_recvs.pop_front();
  } else {
    if (ep->unexpected.size() >= kMaxUnexpected ||
        ep->unexpected_bytes + e->length > kMaxUnexpectedBytes) {
      return false;
    }
    ep->unexpected.push_back(Unexpected{std::vector<uint8_t>(payload, payload + e->length), data});
    ep->unexpected_bytes += e->length;
  }
  e->status = kOk;
  return true;
}

bool Inbound(Endpoint* ep) {
  bool work = false;
  const uint32_t slots = ep->header()->slots;
  const uint64_t rb = ep->header()->ring_bytes;
  for (uint32_t s = 0; s < slots; ++s) {
    RingControl* rc = ep->control(static_cast<int>(s));
    uint32_t state = rc->state.load(std::memory_order_acquire);
    if (state != kRingReady && state != kRingClosing) continue;
    InboundState& in = ep->inbound[s];
    uint64_t token = rc->owner.load(std::memory_order_relaxed);
    if (token != in.token) in = InboundState{token, 0, 0, false};
    uint64_t head = rc->head.load(std::memory_order_acquire);
    uint64_t pos = in.tail;
    uint8_t* ring = ep->ring(static_cast<int>(s));
    bool broken = false;
    for (int budget = kInboundBudget; pos < head && budget > 0; --budget) {
      auto* e = reinterpret_cast<EntryHeader*>(ring + pos % rb);
      // The initiator is another process: trust nothing it wrote.
      uint64_t bytes = e->bytes;
      if (bytes < kEntryPayloadOffset || bytes % 64 != 0 || pos % rb + bytes > rb ||
          pos + bytes > head || (e->kind != kEntryPad && e->length + kEntryPayloadOffset > bytes) ||
          (e->kind != kEntryPad && e->kind != kEntryWrite && e->kind != kEntrySend)) {
        broken = true;
        break;
      }
      if (!Deliver(ep, in, rc, e)) break;
      pos += bytes;
    }
    if (broken) {
      FreeSlot(rc);
      in = InboundState{};
      continue;
    }
    if (pos != in.tail) {
      in.tail = pos;
      rc->tail.store(pos, std::memory_order_release);
      work = true;
    }
    if (state == kRingClosing && pos == head) {
      FreeSlot(rc);
      in = InboundState{};
    }
  }
  return work;
}

bool MatchUnexpected(Endpoint* ep) {
  bool work = false;
  while (!ep->unexpected.empty() && !ep->posted_recvs.empty()) {
    Unexpected& u = ep->unexpected.front();
    if (!CompleteRecv(ep, ep->posted_recvs.front(), u.payload.data(), u.payload.size(), u.data))
      break;
    ep->unexpected_bytes -= u.payload.size();
    ep->unexpected.pop_front();
    ep->posted_recvs.pop_front();
    work = true;
  }
  return work;
}

// Dead peers, both ways: our writes into a gone target fail; rings claimed
// by a gone initiator are freed.
void CheckPeers(Endpoint* ep) {
  for (auto it = ep->connections.begin(); it != ep->connections.end();) {
    Connection* c = it->second.get();
    if (c->failed == kOk && !c->peer->CheckAlive()) c->failed = kPeerGone;
    // A gone peer's connection goes once nothing waits on it, so a
    // long-running server does not keep dead clients' regions mapped.
    if (c->failed != kOk && c->in_flight.empty() && !c->busy) {
      it = ep->connections.erase(it);
    } else {
      ++it;
    }
  }
  const uint32_t slots = ep->header()->slots;
  for (uint32_t s = 0; s < slots; ++s) {
    RingControl* rc = ep->control(static_cast<int>(s));
    if (rc->owner.load(std::memory_order_acquire) == 0) continue;
    pid_t pid = static_cast<pid_t>(rc->owner_pid.load(std::memory_order_relaxed));
    if (ProcessGone(pid)) {
      FreeSlot(rc);
      ep->inbound[s] = InboundState{};
    }
  }
}

}  // namespace

const char* ProviderErrorText(int prov_errno) {
  switch (prov_errno) {
    case kOk:
      return "success";
    case kRemoteAccess:
      return "simnic: remote access error (bad key, range or access rights at the target)";
    case kUnknownPeer:
      return "simnic: REMOTE_ERROR_UNKNOWN_PEER (efa-direct rules: the target's address vector "
             "lacks the initiator)";
    case kPeerGone:
      return "simnic: peer gone (the target process or endpoint no longer exists)";
    case kCqDataTooLarge:
      return "simnic: remote CQ data exceeds the 4 bytes EFA carries";
    case kNoRing:
      return "simnic: the target has no free inbound ring (too many initiators)";
    case kTruncated:
      return "simnic: message larger than the posted receive buffer";
    case kBadRing:
      return "simnic: malformed ring entry";
    case kEqError:
      return "simnic: injected event queue error (SIMNIC_EQ_ERROR)";
    case kCanceled:
      return "simnic: send canceled on demand (SIMNIC_CANCEL_SENDS)";
    default:
      return "simnic: unknown error";
  }
}

Credits* NewCredits() {
  // Kept for the life of the process: completions of a closed endpoint may
  // still sit in a CQ and name its credits.
  static std::mutex mutex;
  static std::deque<Credits> all;  // freed when the provider is unloaded
  std::lock_guard<std::mutex> lock(mutex);
  return &all.emplace_back();
}

// --------------------------------------------------------------------------
// KeyTable

KeyTable::KeyTable() {
  for (auto& chunk : chunks_) chunk.store(nullptr, std::memory_order_relaxed);
}

KeyTable::~KeyTable() {
  for (auto& chunk : chunks_) delete[] chunk.load(std::memory_order_relaxed);
}

uint32_t KeyTable::Add(uint64_t addr, uint64_t len, uint64_t access, uint32_t* index) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t i = 0;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
  } else {
    if (next_ >= (1u << kIndexBits)) return 0;
    i = next_++;
  }
  Slot* chunk = chunks_[i / kChunk].load(std::memory_order_relaxed);
  if (chunk == nullptr) {
    chunk = new Slot[kChunk];
    chunks_[i / kChunk].store(chunk, std::memory_order_release);
  }
  Slot& slot = chunk[i % kChunk];
  // A new generation per use, so a stale key of a closed region fails.
  slot.generation = static_cast<uint16_t>(slot.generation + 1);
  if (slot.generation == 0) slot.generation = 1;
  uint32_t key = (uint32_t{slot.generation} << kIndexBits) | i;
  slot.addr.store(addr, std::memory_order_relaxed);
  slot.len.store(len, std::memory_order_relaxed);
  slot.access.store(access, std::memory_order_relaxed);
  slot.key.store(key, std::memory_order_release);
  *index = i;
  return key;
}

void KeyTable::Remove(uint32_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  Slot* chunk = chunks_[index / kChunk].load(std::memory_order_relaxed);
  if (chunk == nullptr) return;
  chunk[index % kChunk].key.store(0, std::memory_order_release);
  free_.push_back(index);
}

bool KeyTable::Check(uint64_t key, uint64_t addr, uint64_t len, uint64_t access) const {
  if (key == 0 || key > UINT32_MAX) return false;
  uint32_t i = static_cast<uint32_t>(key) & ((1u << kIndexBits) - 1);
  const Slot* chunk = chunks_[i / kChunk].load(std::memory_order_acquire);
  if (chunk == nullptr) return false;
  const Slot& slot = chunk[i % kChunk];
  if (slot.key.load(std::memory_order_acquire) != key) return false;
  uint64_t start = slot.addr.load(std::memory_order_relaxed);
  uint64_t size = slot.len.load(std::memory_order_relaxed);
  if ((slot.access.load(std::memory_order_relaxed) & access) != access) return false;
  return addr >= start && len <= size && addr - start <= size - len;
}

// --------------------------------------------------------------------------
// Regions

RingControl* Endpoint::control(int slot) const {
  return reinterpret_cast<RingControl*>(region + kPage + slot * SlotStride(header()->ring_bytes));
}

uint8_t* Endpoint::ring(int slot) const {
  return region + kPage + slot * SlotStride(header()->ring_bytes) + kPage;
}

bool CreateRegion(Endpoint* ep, std::string* error) {
  const Model& m = *ep->model;
  size_t size = kPage + static_cast<size_t>(m.ring_slots) * SlotStride(m.ring_bytes);
  // A memfd, not a file in /dev/shm: nothing is left behind when a process
  // is killed; peers reach it through /proc/<pid>/fd/<fd>.
  int fd = static_cast<int>(syscall(SYS_memfd_create, "simnic-endpoint", MFD_CLOEXEC));
  if (fd < 0) {
    *error = std::string("memfd_create: ") + std::strerror(errno);
    return false;
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    *error = std::string("ftruncate: ") + std::strerror(errno);
    close(fd);
    return false;
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    *error = std::string("mmap: ") + std::strerror(errno);
    close(fd);
    return false;
  }
  ep->memfd = fd;
  ep->region = static_cast<uint8_t*>(base);
  ep->region_size = size;
  ep->address = Address{};
  std::memcpy(ep->address.magic, kAddressMagic, sizeof(kAddressMagic));
  ep->address.version = kLayoutVersion;
  ep->address.nic = static_cast<uint16_t>(ep->domain->index);
  ep->address.pid = static_cast<uint32_t>(getpid());
  ep->address.fd = fd;
  ep->address.nonce = RandomToken();
  RegionHeader* h = ep->header();
  h->magic = kRegionMagic;
  h->nonce = ep->address.nonce;
  h->pid = ep->address.pid;
  h->slots = static_cast<uint32_t>(m.ring_slots);
  h->ring_bytes = m.ring_bytes;
  h->slot_stride = SlotStride(m.ring_bytes);
  h->open.store(1, std::memory_order_release);
  ep->inbound.assign(m.ring_slots, InboundState{});
  return true;
}

Endpoint::Endpoint() = default;
Endpoint::~Endpoint() = default;

void ReleaseConnections(Endpoint* ep) {
  for (auto& entry : ep->connections) {
    Connection* c = entry.second.get();
    if (c->slot >= 0 && !c->peer->gone()) {
      c->control->state.store(kRingClosing, std::memory_order_release);
    }
  }
  ep->connections.clear();
  ep->busy.clear();
}

std::string DescribeUnfinished(const Endpoint* ep) {
  std::string text;
  char line[256];
  if (!ep->wire.empty()) {
    const WireOp& w = ep->wire.front();
    std::snprintf(line, sizeof(line),
                  " %zu transmit(s) not yet in a ring (first: %llu of %llu bytes sent, "
                  "due %.0f ns ago);",
                  ep->wire.size(), static_cast<unsigned long long>(w.sent),
                  static_cast<unsigned long long>(w.op.length),
                  static_cast<double>(NowNs()) - w.finish_ns);
    text += line;
  }
  for (const auto& entry : ep->connections) {
    const Connection* c = entry.second.get();
    if (c->in_flight.empty() && c->slot >= 0) continue;
    bool alive = c->failed == kOk && c->control != nullptr;
    std::snprintf(
        line, sizeof(line),
        " connection to pid %d: slot %d, failed %u, %zu fragment(s) in flight, head %llu, "
        "completed %llu, target tail %llu, ring state %u, owned %s;",
        static_cast<int>(entry.first->address().pid), c->slot, c->failed, c->in_flight.size(),
        static_cast<unsigned long long>(c->head), static_cast<unsigned long long>(c->completed),
        alive ? static_cast<unsigned long long>(c->control->tail.load()) : 0ull,
        alive ? c->control->state.load() : 0u,
        alive ? (c->control->owner.load() != 0 ? "yes" : "no (freed by the target)") : "-");
    text += line;
  }
  return text;
}

void DestroyRegion(Endpoint* ep) {
  if (ep->region == nullptr) return;
  ep->header()->open.store(0, std::memory_order_release);
  munmap(ep->region, ep->region_size);
  close(ep->memfd);
  ep->region = nullptr;
  ep->memfd = -1;
}

std::shared_ptr<PeerRegion> PeerRegion::Open(const Address& address, std::string* error) {
  if (std::memcmp(address.magic, kAddressMagic, sizeof(kAddressMagic)) != 0 ||
      address.version != kLayoutVersion || address.pid == 0 || address.fd < 0) {
    *error = "not a simnic address";
    return nullptr;
  }
  std::string path = "/proc/" + std::to_string(address.pid) + "/fd/" + std::to_string(address.fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *error = "cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < static_cast<off_t>(kPage)) {
    close(fd);
    *error = path + " is no simnic endpoint";
    return nullptr;
  }
  void* base =
      mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    *error = "cannot map " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  std::shared_ptr<PeerRegion> peer(new PeerRegion());
  peer->address_ = address;
  peer->base_ = static_cast<uint8_t*>(base);
  peer->size_ = static_cast<size_t>(st.st_size);
  peer->header_ = reinterpret_cast<RegionHeader*>(base);
  const RegionHeader* h = peer->header_;
  if (h->magic != kRegionMagic || h->nonce != address.nonce || h->pid != address.pid ||
      h->slots == 0 || h->ring_bytes % 64 != 0 ||
      kPage + h->slots * SlotStride(h->ring_bytes) > peer->size_) {
    *error = "the endpoint at " + path + " is gone (another file holds its descriptor)";
    return nullptr;
  }
  peer->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, address.pid, 0));
  peer->CheckAlive();
  return peer;
}

PeerRegion::~PeerRegion() {
  if (base_ != nullptr) munmap(base_, size_);
  if (pidfd_ >= 0) close(pidfd_);
}

RingControl* PeerRegion::control(int slot) const {
  return reinterpret_cast<RingControl*>(base_ + kPage + slot * header_->slot_stride);
}

uint8_t* PeerRegion::ring(int slot) const {
  return base_ + kPage + slot * header_->slot_stride + kPage;
}

bool PeerRegion::CheckAlive() {
  if (gone_) return false;
  if (header_->open.load(std::memory_order_acquire) == 0) {
    gone_ = true;
  } else if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    gone_ = poll(&p, 1, 0) > 0;  // a pidfd turns readable when the process exits
  } else {
    gone_ = ProcessGone(static_cast<pid_t>(address_.pid));
  }
  return !gone_;
}

// --------------------------------------------------------------------------
// Engine

struct Engine::Worker {
  std::thread thread;
  std::vector<int> cpus;  // where it may run; empty: anywhere
  std::mutex mutex;
  std::vector<Endpoint*> endpoints;
  std::atomic<uint64_t> generation{0};
  std::atomic<uint64_t> seen{0};
  std::atomic<bool> stop{false};
};

namespace {
std::atomic<bool> engine_created{false};
}  // namespace

Engine& Engine::Get() {
  static Engine engine;
  engine_created.store(true, std::memory_order_release);
  return engine;
}

bool Engine::Created() { return engine_created.load(std::memory_order_acquire); }

Engine::~Engine() { StopAll(); }

bool Engine::Step(Endpoint* ep, uint64_t now) {
  bool work = PullSubmissions(ep, now);
  work |= Transmit(ep, now);
  work |= Reap(ep);
  work |= Inbound(ep);
  work |= MatchUnexpected(ep);
  if (now >= ep->next_peer_check_ns) {
    CheckPeers(ep);
    ep->next_peer_check_ns = now + uint64_t{ep->model->peer_check_ms} * 1000000;
  }
  return work;
}

namespace {
// Napping engine threads wait on this word; a doorbell bumps it (WakeNappers).
std::atomic<uint32_t> nap_sequence{0};
std::atomic<int> nappers{0};
}  // namespace

void Engine::WakeNappers() {
  // Read without a fence: a doorbell that misses a worker going to sleep at
  // that instant costs that worker's one nap (kLongestNapNs at most).
  if (nappers.load(std::memory_order_relaxed) == 0) return;
  nap_sequence.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, &nap_sequence, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

void Engine::Run(Worker* worker) {
  // Short sleeps must stay short: the default timer slack is 50 us.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  if (!worker->cpus.empty()) {
    // Off the cores the writers are pinned to (the tools say which).
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : worker->cpus) CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
      std::fprintf(stderr, "simnic: engine thread cannot use SIMNIC_ENGINE_CPUS; runs anywhere\n");
      worker->cpus.clear();  // and waits as a floating engine thread does
    }
  }
  std::vector<Endpoint*> endpoints;
  uint64_t generation = ~uint64_t{0};
  uint64_t last_work_ns = NowNs();
  uint64_t nap_ns = kShortestNapNs;
  int idle = 0;
  while (!worker->stop.load(std::memory_order_relaxed)) {
    uint64_t g = worker->generation.load(std::memory_order_acquire);
    if (g != generation) {
      std::lock_guard<std::mutex> lock(worker->mutex);
      endpoints = worker->endpoints;
      generation = worker->generation.load(std::memory_order_relaxed);
    }
    worker->seen.store(generation, std::memory_order_release);
    uint64_t now = NowNs();
    bool work = false;
    bool waiting = false;  // operations queued or in flight
    for (Endpoint* ep : endpoints) {
      work |= Step(ep, now);
      waiting |= !ep->wire.empty() || !ep->busy.empty();
    }
    if (work) {
      last_work_ns = now;
      nap_ns = kShortestNapNs;
      idle = 0;
      continue;
    }
    if (!worker->cpus.empty()) {
      // On a CPU the tools gave it (SIMNIC_ENGINE_CPUS), beside the other
      // process's engines and the client's poller, not beside writers: it
      // spins a little, then sleeps for microseconds, so that those get the
      // CPU at once. (Spinning there put 15 at 93% of 14 under taskset;
      // docs/simnic.md, "Why CI's chapter 12 still stalled".)
      if (++idle < 64) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(waiting ? 5 : idle < 10000 ? 20 : 200));
      continue;
    }
    // Left to float beside the writers (no SIMNIC_ENGINE_CPUS: the tests,
    // a chapter run by hand), it never sleeps while the NIC is in use: it
    // spins, and lets another thread have the core now and then. Sleeping
    // for microseconds there made it wake thousands of times a second, and
    // on Linux 6.x (EEVDF with autogroups) a process whose threads sleep
    // and wake that often beside pinned busy threads was measured starving
    // whole other processes for tens of seconds: CI's chapter 12 stalls
    // (docs/simnic.md, "Why CI's chapter 12 still stalled").
    if (now - last_work_ns < kSpinAfterWorkNs) {
      if (++idle % 64 == 0) {
        sched_yield();
      } else {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      }
      continue;
    }
    // Idle: naps that double up to kLongestNapNs; a doorbell ends one early
    // (a message from a peer waits for the nap's end).
    uint32_t sequence = nap_sequence.load(std::memory_order_acquire);
    nappers.fetch_add(1, std::memory_order_acq_rel);
    bool posted = false;
    for (Endpoint* ep : endpoints) {
      posted |= ep->published.load(std::memory_order_acquire) !=
                ep->consumed.load(std::memory_order_relaxed);
    }
    if (!posted) {
      timespec nap{static_cast<time_t>(nap_ns / 1000000000),
                   static_cast<long>(nap_ns % 1000000000)};
      syscall(SYS_futex, &nap_sequence, FUTEX_WAIT_PRIVATE, sequence, &nap, nullptr, 0);
      nap_ns = std::min(nap_ns * 2, kLongestNapNs);
    }
    nappers.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void Engine::Add(Endpoint* ep) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (workers_.empty()) {
    int threads = ep->model->engine_threads;
    const std::vector<int>& cpus = ep->model->engine_cpus;
    for (int i = 0; i < threads; ++i) {
      workers_.push_back(std::make_unique<Worker>());
      // One CPU each, in turn: engine threads that sleep and wake by the
      // microsecond, left to float over a shared list, get stacked on one
      // CPU by wake-up placement now and then, and fall behind the line.
      if (!cpus.empty()) workers_.back()->cpus = {cpus[static_cast<size_t>(i) % cpus.size()]};
    }
    for (size_t k = 0; k < workers_.size(); ++k) {
      Worker* raw = workers_[k].get();
      raw->thread = std::thread([this, raw] { Run(raw); });
      // Named here, before Add returns, so the name is there for ps -L (and
      // for the test that looks the thread up) as soon as the endpoint is.
      pthread_setname_np(raw->thread.native_handle(), ("engine-" + std::to_string(k)).c_str());
    }
  }
  Worker* w = workers_[ep->domain->index % workers_.size()].get();
  {
    std::lock_guard<std::mutex> worker_lock(w->mutex);
    w->endpoints.push_back(ep);
    w->generation.fetch_add(1, std::memory_order_release);
  }
  ++endpoints_;
}

bool Engine::Remove(Endpoint* ep) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (workers_.empty()) return true;
  Worker* w = workers_[ep->domain->index % workers_.size()].get();
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> worker_lock(w->mutex);
    auto it = std::find(w->endpoints.begin(), w->endpoints.end(), ep);
    if (it == w->endpoints.end()) return true;
    w->endpoints.erase(it);
    generation = w->generation.fetch_add(1, std::memory_order_release) + 1;
  }
  // The worker publishes the generation it runs with at the top of each
  // pass; once it has taken this one, it no longer touches `ep`. Bounded:
  // a worker that got no core for kRemoveWaitNs leaves `ep` to the caller
  // to keep (never freed) rather than a wait without end.
  constexpr uint64_t kRemoveWaitNs = 5000000000ull;
  uint64_t until = NowNs() + kRemoveWaitNs;
  while (w->seen.load(std::memory_order_acquire) < generation) {
    if (NowNs() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
  if (--endpoints_ == 0) {
    for (auto& worker : workers_) worker->stop.store(true);
    for (auto& worker : workers_) worker->thread.join();
    workers_.clear();
  }
  return true;
}

void Engine::StopAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& worker : workers_) worker->stop.store(true);
  for (auto& worker : workers_) {
    if (worker->thread.joinable()) worker->thread.join();
  }
  workers_.clear();
  endpoints_ = 0;
}

}  // namespace simnic
