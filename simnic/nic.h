// The simulated NIC's objects: what libfabric's fids point to (provider.cc
// fills in the function tables) and what the data path (engine.cc) works on.
//
// The data path in one paragraph. A post writes a Descriptor into the
// endpoint's submit ring; the doorbell (a post without FI_MORE) publishes
// everything written so far. An engine thread of the process takes published
// descriptors, paces them at the NIC's line rate, and copies each WRITE or
// SEND into an inbound ring that the target endpoint keeps in shared memory
// (a memfd, mapped by peers through /proc/<pid>/fd/<fd>). The target's engine
// checks key and bounds, copies the payload into the registered memory,
// writes its CQ entries and stamps a status into the ring entry; the
// initiator's engine reads that status once the target has moved past it,
// and completes the operation.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "simnic/model.h"

namespace simnic {

// ---------------------------------------------------------------------------
// What other processes see: the address and the inbound region.

constexpr char kAddressMagic[4] = {'S', 'I', 'M', 'N'};
constexpr uint16_t kLayoutVersion = 1;

// 32 bytes, as an EFA address. A new endpoint gets a new nonce, so a rebuilt
// endpoint has a new address, as an EFA endpoint gets a new QP number.
struct Address {
  char magic[4];
  uint16_t version;
  uint16_t nic;    // domain index, for messages only
  uint32_t pid;    // the process that owns the inbound region
  int32_t fd;      // the region's memfd in that process
  uint64_t nonce;  // this endpoint's, also stamped in the region header
  uint64_t reserved;
};
static_assert(sizeof(Address) == 32, "EFA addresses are 32 bytes");
using AddressBytes = std::array<uint8_t, sizeof(Address)>;

constexpr uint64_t kRegionMagic = 0x53494d4e49433031ull;  // "SIMNIC01"

struct RegionHeader {
  uint64_t magic;
  uint64_t nonce;
  uint32_t pid;
  uint32_t slots;
  uint64_t ring_bytes;
  uint64_t slot_stride;
  std::atomic<uint32_t> open;  // 0 once the endpoint is closed
};

enum RingState : uint32_t { kRingFree = 0, kRingReady = 2, kRingClosing = 3 };

// One initiator's inbound ring: claimed by the initiator (owner), produced
// by it (head), consumed by the target (tail).
struct alignas(64) RingControl {
  std::atomic<uint64_t> owner;  // claim token, 0 while free
  std::atomic<uint32_t> owner_pid;
  std::atomic<uint32_t> state;
  uint8_t initiator[sizeof(Address)];  // for efa-direct's AV rule
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> tail;
};

enum EntryKind : uint8_t { kEntryPad = 1, kEntryWrite = 2, kEntrySend = 3 };
enum EntryFlags : uint8_t { kEntryLast = 1, kEntryCqData = 2 };

// A ring entry: this header at a 64-byte boundary, the payload 64 bytes on.
struct EntryHeader {
  uint32_t bytes;  // the whole entry, a multiple of 64
  uint8_t kind;
  uint8_t flags;
  uint16_t status;  // written by the target: a ProviderError
  uint32_t length;  // payload bytes in this entry
  uint32_t cq_data;
  uint64_t remote_addr;
  uint64_t key;
  uint64_t total;  // the whole write or message
};
constexpr size_t kEntryPayloadOffset = 64;
constexpr size_t kMaxFragment = 64 * 1024;

// prov_errno values of error completions (fi_cq_strerror names them).
enum ProviderError : uint16_t {
  kOk = 0,
  kRemoteAccess = 1,    // bad key, range or access at the target
  kUnknownPeer = 2,     // efa-direct: the target's AV lacks the initiator
  kPeerGone = 3,        // the target process or endpoint is gone
  kCqDataTooLarge = 4,  // EFA carries 4 bytes of remote CQ data
  kNoRing = 5,          // the target has no free inbound ring
  kTruncated = 6,       // a message larger than the receive buffer
  kBadRing = 7,         // a malformed ring entry (a broken peer)
  kEqError = 8,         // SIMNIC_EQ_ERROR: an event-queue error on demand
  kCanceled = 9,        // SIMNIC_CANCEL_SENDS: a send canceled on demand
};

// SIMNIC_CANCEL_SENDS=<n>: this process's first n sends complete with
// FI_ECANCELED and are not delivered, as a connection closed under them
// cancels them over tcp (the provider flushes its queues).
bool TakeCanceledSend();
const char* ProviderErrorText(int prov_errno);

// ---------------------------------------------------------------------------
// The FI_THREAD_SAFE lock of an endpoint's post path and of a CQ. Never a
// wait without bound: a caller that cannot take it within kLockSpinNs, or
// within kLockSpinRounds rounds of tries, answers -FI_EAGAIN (its holder may
// be a thread that got no core), as a full queue does. The count bounds the
// wait where the clock cannot: a sanitizer or a crowded core can make each
// try, and each reading of the clock, take far longer than on a quiet
// machine. It remembers who took it last: a lock taken from another thread
// costs its cache line's move (Model::lock_line_ns).
struct BoundedLock {
  static constexpr uint64_t kLockSpinNs = 20000;
  // Rounds of 64 tries: 80 us or more of pauses, so that on a quiet core
  // the clock ends the wait first.
  static constexpr int kLockSpinRounds = 256;
  std::atomic<bool> held{false};
  int last_tid = 0;  // under the lock
  int last_socket = -1;
  // True once held; false after `spin_ns` of trying (a deadline fixed at
  // the first refusal) or kLockSpinRounds rounds, whichever comes first.
  bool TryLockFor(uint64_t spin_ns) {
    if (!held.exchange(true, std::memory_order_acquire)) return true;
    uint64_t until = NowNs() + spin_ns;
    for (int round = 0; round < kLockSpinRounds; ++round) {
      for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        if (!held.load(std::memory_order_relaxed) &&
            !held.exchange(true, std::memory_order_acquire))
          return true;
      }
      if (NowNs() >= until) return false;
    }
    return false;
  }
  void Unlock() { held.store(false, std::memory_order_release); }
};

// ---------------------------------------------------------------------------
// Completion queue: a single-producer (the domain's engine thread),
// single-consumer (the polling thread) ring.

struct Credits {
  std::atomic<int64_t> tx{0};
  std::atomic<int64_t> rx{0};
};
// Credit blocks outlive their endpoints (completions can still name them).
Credits* NewCredits();

enum CreditKind : uint8_t { kNoCredit = 0, kTxCredit = 1, kRxCredit = 2 };

struct CqEntry {
  void* op_context;
  uint64_t flags;
  size_t len;
  void* buf;
  uint64_t data;
  size_t olen;
  int err;  // positive libfabric error, 0 for success
  int prov_errno;
  Credits* credits;
  CreditKind credit;
};

struct Domain;

struct CompletionQueue {
  fid_cq cq{};
  Domain* domain = nullptr;
  fi_cq_format format = FI_CQ_FORMAT_DATA;
  bool locked = false;
  BoundedLock lock;
  std::vector<CqEntry> entries;
  uint64_t mask = 0;
  std::atomic<int> bound_endpoints{0};
  alignas(64) std::atomic<uint64_t> produced{0};
  alignas(64) std::atomic<uint64_t> consumed{0};

  bool HasSpace(size_t n = 1) const {
    return produced.load(std::memory_order_relaxed) + n -
               consumed.load(std::memory_order_acquire) <=
           entries.size();
  }
  void Push(const CqEntry& entry) {  // engine thread, after HasSpace()
    uint64_t p = produced.load(std::memory_order_relaxed);
    entries[p & mask] = entry;
    produced.store(p + 1, std::memory_order_release);
  }
};

// ---------------------------------------------------------------------------
// Memory registrations of a domain, found by key from the engine thread.

struct MemoryRegion {
  fid_mr mr{};
  Domain* domain = nullptr;
  uint64_t addr = 0;
  uint64_t len = 0;
  uint64_t access = 0;
  uint32_t index = 0;
};

class KeyTable {
 public:
  static constexpr uint32_t kIndexBits = 16;
  static constexpr uint32_t kChunk = 256;
  KeyTable();
  ~KeyTable();
  // Returns the new key, 0 when the table is full.
  uint32_t Add(uint64_t addr, uint64_t len, uint64_t access, uint32_t* index);
  void Remove(uint32_t index);
  // The engine's check: a live key whose range holds [addr, addr+len).
  bool Check(uint64_t key, uint64_t addr, uint64_t len, uint64_t access) const;

 private:
  struct Slot {
    std::atomic<uint32_t> key{0};
    std::atomic<uint64_t> addr{0};
    std::atomic<uint64_t> len{0};
    std::atomic<uint64_t> access{0};
    uint16_t generation = 0;
  };
  std::mutex mutex_;
  std::atomic<Slot*> chunks_[(1u << kIndexBits) / kChunk];
  std::vector<uint32_t> free_;
  uint32_t next_ = 1;  // index 0 is never used, so no key is 0
};

// ---------------------------------------------------------------------------
// Fabric, domain, event queue, address vector.

struct Fabric {
  fid_fabric fabric{};
  std::atomic<int> domains{0};
};

struct Domain {
  fid_domain domain{};
  Fabric* fabric = nullptr;
  int index = 0;  // simnic<index>
  const Model* model = nullptr;
  bool locked = true;  // threading other than FI_THREAD_DOMAIN
  bool hmem = false;
  uint32_t api_version = 0;
  int nic_node = 0;  // virtual NUMA node of this NIC
  std::atomic<int> refs{0};
  KeyTable keys;
};

// SIMNIC_EQ_ERROR=<file>: when the file appears, every event queue bound
// to an endpoint of the domain it names (its content, e.g. "simnic1"; empty:
// every domain) reports one error at its next read, as EFA's do for errors
// of its internal operations (efa_base_ep_write_eq_error). The first read
// that sees the file removes it; each appearance is one more error.
struct EventQueue {
  fid_eq eq{};
  std::mutex mutex;
  int domain = -1;               // simnic<domain> of the bound endpoint
  uint64_t injections_seen = 0;  // appearances of the file accounted for
  bool error_pending = false;
};

// A mapping of a peer endpoint's inbound region.
class PeerRegion : public std::enable_shared_from_this<PeerRegion> {
 public:
  // Maps the region named by `address`; nullptr (with `error`) when it
  // cannot: no such process, endpoint or permission.
  static std::shared_ptr<PeerRegion> Open(const Address& address, std::string* error);
  ~PeerRegion();
  const Address& address() const { return address_; }
  RingControl* control(int slot) const;
  uint8_t* ring(int slot) const;
  uint32_t slots() const { return header_->slots; }
  uint64_t ring_bytes() const { return header_->ring_bytes; }
  // False once the process has exited or the endpoint was closed. Costs a
  // system call: the engine asks now and then, not per operation.
  bool CheckAlive();
  bool gone() const { return gone_; }

 private:
  PeerRegion() = default;
  Address address_{};
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  RegionHeader* header_ = nullptr;
  int pidfd_ = -1;
  bool gone_ = false;
};

struct AddressVector {
  static constexpr size_t kCapacity = 8192;
  fid_av av{};
  Domain* domain = nullptr;
  std::mutex mutex;  // inserts and removes, and the engine's direct-mode lookups
  // fi_addr -> peer, read by posts without a lock: a fixed array, so an
  // insert never moves what a post reads.
  std::unique_ptr<std::atomic<PeerRegion*>[]> lookup;
  std::vector<AddressBytes> addresses;  // by fi_addr
  std::vector<size_t> free_slots;
  size_t used = 0;
  std::multiset<AddressBytes> known;  // for efa-direct's AV rule
  std::atomic<uint64_t> generation{1};
  std::atomic<int> bound_endpoints{0};
  std::vector<std::shared_ptr<PeerRegion>> peers;  // by fi_addr
  // Removed peers stay mapped a while: an operation posted just before the
  // removal may still be on its way to the engine, which then takes its own
  // reference. (A long-running server must not keep every client mapped.)
  std::deque<std::pair<uint64_t, std::shared_ptr<PeerRegion>>> retired;
};

// ---------------------------------------------------------------------------
// Endpoint.

enum class OpKind : uint8_t { kWrite, kSend, kRecv };

// What a target's remote-write completion carries in op_context: never a
// context of the application's, never null (see Engine, remote writes).
inline void* const kStaleRemoteWriteContext = reinterpret_cast<void*>(uintptr_t{0x5a1e0c0de});

struct Descriptor {
  void* context;
  uint8_t* buf;  // local source (write, send) or destination (recv)
  uint64_t length;
  uint64_t remote_addr;
  uint64_t key;
  uint64_t data;
  PeerRegion* peer;
  OpKind kind;
  bool completion;
  bool has_data;
};

struct Connection;

struct WireOp {
  Descriptor op;
  double finish_ns;   // the line-rate model's earliest completion
  uint64_t sent = 0;  // bytes already in the target's ring
  uint16_t error = kOk;
};

struct Unexpected {
  std::vector<uint8_t> payload;
  uint64_t data;
};

struct InboundState {
  uint64_t token = 0;
  uint64_t tail = 0;
  uint64_t av_generation = 0;
  bool known = false;
};

struct Endpoint {
  fid_ep ep{};
  Domain* domain = nullptr;
  const Model* model = nullptr;
  CompletionQueue* tx_cq = nullptr;
  CompletionQueue* rx_cq = nullptr;
  bool tx_selective = false;
  bool rx_selective = false;
  AddressVector* av = nullptr;
  EventQueue* eq = nullptr;
  uint64_t tx_op_flags = FI_COMPLETION;
  bool enabled = false;
  bool locked = true;
  int nic_node = 0;
  Credits* credits = nullptr;

  // The inbound region.
  int memfd = -1;
  uint8_t* region = nullptr;
  size_t region_size = 0;
  Address address{};

  // The submit ring: posts produce, the engine consumes.
  BoundedLock post_lock;
  // (remote region, key) pairs this endpoint has written to: the first
  // WRITE into each pays Model::first_contact_ns (under post_lock).
  std::vector<std::pair<const PeerRegion*, uint64_t>> contacted;
  std::vector<Descriptor> submit;
  uint64_t submit_mask = 0;
  uint64_t produced = 0;  // under post_lock
  // Doorbells rung, and those rung from another virtual NUMA node than the
  // NIC's (under post_lock, like `produced`); SIMNIC_STATS prints them.
  uint64_t doorbells = 0;
  uint64_t remote_doorbells = 0;
  alignas(64) std::atomic<uint64_t> published{0};
  alignas(64) std::atomic<uint64_t> consumed{0};

  // Engine state (only the endpoint's engine thread touches it).
  // Transmits, and those the engine put on the wire more than kLateNs after
  // the line would have finished them: an engine behind the line rate
  // (SIMNIC_REPORT tells the tools).
  static constexpr uint64_t kLateNs = 1000000;
  uint64_t transmits = 0;
  uint64_t late_transmits = 0;
  std::deque<WireOp> wire;
  double wire_free_ns = 0;
  std::unordered_map<PeerRegion*, std::unique_ptr<Connection>> connections;
  std::vector<Connection*> busy;  // connections with entries in flight
  std::deque<Descriptor> posted_recvs;
  std::deque<Unexpected> unexpected;
  size_t unexpected_bytes = 0;
  std::vector<InboundState> inbound;
  uint64_t next_peer_check_ns = 0;

  Endpoint();  // both in engine.cc, where Connection is complete
  ~Endpoint();
  RegionHeader* header() const { return reinterpret_cast<RegionHeader*>(region); }
  RingControl* control(int slot) const;
  uint8_t* ring(int slot) const;
};

// Creates the endpoint's inbound region and address. False with `error`.
bool CreateRegion(Endpoint* ep, std::string* error);
void DestroyRegion(Endpoint* ep);
// Hands the endpoint's inbound rings at its targets back: they drain them,
// then free them for other initiators. Call once the engine has let go.
void ReleaseConnections(Endpoint* ep);
// What the endpoint still holds, for SIMNIC_STATS: transmits not yet in a
// target's ring, and per connection the bytes in flight with the target's
// ring state. "" when nothing is left. Call once the engine has let go.
std::string DescribeUnfinished(const Endpoint* ep);

// The engine threads of this process.
class Engine {
 public:
  static Engine& Get();
  // Whether Get() ever ran: the provider's cleanup must not create the
  // engine at exit (its destructor would be registered after the core has
  // begun unloading the provider, and run from unmapped code).
  static bool Created();
  void Add(Endpoint* ep);
  // Returns true once no engine thread touches `ep` any more; false when
  // its engine thread did not let go within 5 s (`ep` must then be kept).
  bool Remove(Endpoint* ep);
  void StopAll();
  ~Engine();

  // One pass over one endpoint; true when it did any work. (Public for the
  // micro-benchmark.)
  static bool Step(Endpoint* ep, uint64_t now_ns);

  // After a doorbell: ends the nap of any engine thread that sleeps. Cheap
  // when none does (one load).
  static void WakeNappers();

  // An engine thread spins for this long after its last work, then naps:
  // 1 ms, doubling up to kLongestNapNs (see Run for why never shorter).
  static constexpr uint64_t kSpinAfterWorkNs = 20000000;
  static constexpr uint64_t kShortestNapNs = 1000000;
  static constexpr uint64_t kLongestNapNs = 16000000;

 private:
  struct Worker;
  Engine() = default;
  void Run(Worker* worker);
  std::mutex mutex_;
  std::vector<std::unique_ptr<Worker>> workers_;
  size_t endpoints_ = 0;
};

}  // namespace simnic
