// The atomic census: how many atomic read-modify-writes and stores a
// chapter's server makes, and how many of them hit an atomic that another
// thread wrote last (its cache line had to come from that thread's core).
// Chapter 13's lesson is the shared counters gone; the census counts them
// without a line in the chapter.
//
// How: the census build of a chapter (`:server_atomic_census`,
// chapters/chapter.bzl) compiles its server.cc with the compiler's
// ThreadSanitizer instrumentation (-fsanitize=thread, that file alone) and
// links this library instead of the sanitizer's runtime. The compiler then
// turns every std::atomic operation of that file, and of the inline code it
// uses from common/, into a call of a __tsan_atomic* function; the ones
// here do the operation and count it. Plain loads and stores call
// __tsan_read*/__tsan_write*, which do nothing. Code of other files
// (common/*.cc, libfabric, the provider) is not instrumented, not counted.
//
// The counts are exact; only "another thread wrote it last" depends on how
// the threads interleaved. The census slows every atomic operation (a hash
// table look-up): its runs count, they do not time. At exit it writes one
// line, appended to the file TUTORIAL_ATOMIC_CENSUS names, or on stderr:
//   atomic-census pid=N rmw=N stores=N cross_thread_writes=N cross_thread_rmw=N
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// Each atomic's last writer, by address (open addressing, never removed: a
// census run is short). An atomic the table has no room for is counted but
// not told apart.
constexpr size_t kAddressSlots = size_t{1} << 16;
constexpr size_t kProbes = 64;
struct AddressSlot {
  std::atomic<uintptr_t> address{0};
  std::atomic<uint32_t> last_writer{0};
};
AddressSlot address_slots[kAddressSlots];

// Counts per thread, each in a line of its own, summed at exit.
constexpr uint32_t kThreadSlots = 1024;
struct alignas(64) ThreadCounts {
  std::atomic<uint64_t> rmw{0};
  std::atomic<uint64_t> stores{0};
  std::atomic<uint64_t> cross_thread_writes{0};
  std::atomic<uint64_t> cross_thread_rmw{0};
};
ThreadCounts thread_counts[kThreadSlots];
std::atomic<uint32_t> threads_seen{0};
thread_local uint32_t this_thread_id = 0;  // 1-based; 0: not seen yet

uint32_t ThisThreadId() {
  if (this_thread_id == 0) this_thread_id = threads_seen.fetch_add(1) + 1;
  return this_thread_id;
}

void Add(std::atomic<uint64_t>& counter) {
  // Only this thread writes its slot (past kThreadSlots threads, the last
  // slot is shared and its counts may be a little short).
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void CountWrite(const volatile void* address, bool rmw) {
  uint32_t me = ThisThreadId();
  ThreadCounts& mine = thread_counts[(me < kThreadSlots ? me : kThreadSlots) - 1];
  Add(rmw ? mine.rmw : mine.stores);
  auto key = reinterpret_cast<uintptr_t>(address);
  size_t i = static_cast<size_t>(((key >> 3) * 0x9E3779B97F4A7C15ull) >> 48) % kAddressSlots;
  for (size_t probe = 0; probe < kProbes; ++probe, i = (i + 1) % kAddressSlots) {
    uintptr_t seen = address_slots[i].address.load(std::memory_order_acquire);
    if (seen == 0 && !address_slots[i].address.compare_exchange_strong(seen, key)) {
      if (seen != key) continue;  // another atomic took the slot first
    } else if (seen != 0 && seen != key) {
      continue;
    }
    uint32_t last = address_slots[i].last_writer.exchange(me, std::memory_order_relaxed);
    if (last != 0 && last != me) {
      Add(mine.cross_thread_writes);
      if (rmw) Add(mine.cross_thread_rmw);
    }
    return;
  }
}

// At exit, after the threads were joined: the sums.
struct Report {
  ~Report() {
    uint64_t rmw = 0, stores = 0, cross = 0, cross_rmw = 0;
    for (auto& t : thread_counts) {
      rmw += t.rmw.load();
      stores += t.stores.load();
      cross += t.cross_thread_writes.load();
      cross_rmw += t.cross_thread_rmw.load();
    }
    const char* path = std::getenv("TUTORIAL_ATOMIC_CENSUS");
    FILE* out = path != nullptr && *path ? std::fopen(path, "a") : nullptr;
    std::fprintf(out != nullptr ? out : stderr,
                 "atomic-census pid=%d rmw=%llu stores=%llu cross_thread_writes=%llu "
                 "cross_thread_rmw=%llu\n",
                 static_cast<int>(getpid()), static_cast<unsigned long long>(rmw),
                 static_cast<unsigned long long>(stores), static_cast<unsigned long long>(cross),
                 static_cast<unsigned long long>(cross_rmw));
    if (out != nullptr) std::fclose(out);
  }
} report;

}  // namespace

// The hooks -fsanitize=thread calls (the sanitizer runtime's interface,
// compiler-rt's tsan_interface.h and tsan_interface_atomic.h). The memory
// order argument is ignored: every operation is sequentially consistent,
// at least as strong as asked.
#define CENSUS_EXPORT extern "C" __attribute__((visibility("default")))

CENSUS_EXPORT void __tsan_init() {}
CENSUS_EXPORT void __tsan_func_entry(void*) {}
CENSUS_EXPORT void __tsan_func_exit() {}
CENSUS_EXPORT void __tsan_vptr_update(void**, void*) {}
CENSUS_EXPORT void __tsan_vptr_read(void**) {}
CENSUS_EXPORT void __tsan_ignore_thread_begin() {}
CENSUS_EXPORT void __tsan_ignore_thread_end() {}
CENSUS_EXPORT void __tsan_read_range(void*, unsigned long) {}
CENSUS_EXPORT void __tsan_write_range(void*, unsigned long) {}
CENSUS_EXPORT void* __tsan_memcpy(void* to, const void* from, size_t n) {
  return std::memcpy(to, from, n);
}
CENSUS_EXPORT void* __tsan_memmove(void* to, const void* from, size_t n) {
  return std::memmove(to, from, n);
}
CENSUS_EXPORT void* __tsan_memset(void* to, int c, size_t n) { return std::memset(to, c, n); }
CENSUS_EXPORT void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
CENSUS_EXPORT void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

#define CENSUS_PLAIN_ACCESS(n)                            \
  CENSUS_EXPORT void __tsan_read##n(void*) {}             \
  CENSUS_EXPORT void __tsan_write##n(void*) {}            \
  CENSUS_EXPORT void __tsan_unaligned_read##n(void*) {}   \
  CENSUS_EXPORT void __tsan_unaligned_write##n(void*) {}  \
  CENSUS_EXPORT void __tsan_read##n##_pc(void*, void*) {} \
  CENSUS_EXPORT void __tsan_write##n##_pc(void*, void*) {}
CENSUS_PLAIN_ACCESS(1)
CENSUS_PLAIN_ACCESS(2)
CENSUS_PLAIN_ACCESS(4)
CENSUS_PLAIN_ACCESS(8)
CENSUS_PLAIN_ACCESS(16)

#define CENSUS_RMW(bits, T, op, builtin)                                \
  CENSUS_EXPORT T __tsan_atomic##bits##_##op(volatile T* a, T v, int) { \
    CountWrite(a, true);                                                \
    return builtin(a, v, __ATOMIC_SEQ_CST);                             \
  }
#define CENSUS_ATOMICS(bits, T)                                                                    \
  CENSUS_EXPORT T __tsan_atomic##bits##_load(const volatile T* a, int) {                           \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                \
  CENSUS_EXPORT void __tsan_atomic##bits##_store(volatile T* a, T v, int) {                        \
    CountWrite(a, false);                                                                          \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                      \
  }                                                                                                \
  CENSUS_RMW(bits, T, exchange, __atomic_exchange_n)                                               \
  CENSUS_RMW(bits, T, fetch_add, __atomic_fetch_add)                                               \
  CENSUS_RMW(bits, T, fetch_sub, __atomic_fetch_sub)                                               \
  CENSUS_RMW(bits, T, fetch_and, __atomic_fetch_and)                                               \
  CENSUS_RMW(bits, T, fetch_or, __atomic_fetch_or)                                                 \
  CENSUS_RMW(bits, T, fetch_xor, __atomic_fetch_xor)                                               \
  CENSUS_RMW(bits, T, fetch_nand, __atomic_fetch_nand)                                             \
  CENSUS_EXPORT int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* expected, T v, \
                                                                  int, int) {                      \
    CountWrite(a, true);                                                                           \
    return __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
  }                                                                                                \
  CENSUS_EXPORT int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* expected, T v,   \
                                                                int, int) {                        \
    CountWrite(a, true);                                                                           \
    return __atomic_compare_exchange_n(a, expected, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);  \
  }                                                                                                \
  CENSUS_EXPORT T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T expected, T v, int,  \
                                                             int) {                                \
    CountWrite(a, true);                                                                           \
    __atomic_compare_exchange_n(a, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
    return expected;                                                                               \
  }
CENSUS_ATOMICS(8, uint8_t)
CENSUS_ATOMICS(16, uint16_t)
CENSUS_ATOMICS(32, uint32_t)
CENSUS_ATOMICS(64, uint64_t)
