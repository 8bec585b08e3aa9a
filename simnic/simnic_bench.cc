// Measures the model's own costs on this machine, through libfabric as an
// application sees it (not a test: numbers, no verdicts):
//   post      one fi_writemsg with FI_MORE (the descriptor only)
//   doorbell  one fi_writemsg without FI_MORE, minus a post
//   cq poll   one fi_cq_read of an empty CQ
//   engine    WRITEs a second the engine threads move end to end between
//             pairs of NICs in this process, line rate unlimited, CPU costs 0
//
// With --primitives it measures instead what tools/simnic_fit.py --predict
// needs of this machine, and prints one line "simnic_primitives {json}":
//   post_ns, cq_read_ns  what a post (without FI_MORE) and a CQ read take,
//                        charges included, on a pinned thread whose four
//                        NICs are on its socket, in a loop shaped like a
//                        chapter's (post one WRITE, read every NIC's CQ),
//                        the model's frozen costs in force; the charges
//                        are subtracted into post_over_ns and cq_read_over_ns
//   line_ns              one handoff of a cache line between two cores (an
//                        atomic read-modify-write of a line another core
//                        wrote last), the cost of a shared counter
//
//   bazel build //simnic:simnic_bench //simnic:libsimnic-fi.so
//   FI_PROVIDER_PATH=$PWD/bazel-bin/simnic bazel-bin/simnic/simnic_bench [--size 256]
//       [--writes 2000000] [--pairs 1] [--engine-threads 2]
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "simnic/app_nic.h"
#include "simnic/costs.h"

namespace {

using simnic_app::Clock;
using simnic_app::Nic;

// A registered buffer of one NIC, the target of the other's WRITEs.
struct Region {
  Region(Nic& nic, size_t size) : bytes(size), mr(nic.Register(bytes.data(), bytes.size())) {}
  std::vector<uint8_t> bytes;
  fid_mr* mr;
};

// One WRITE of `len` bytes at `offset`, from a's region into b's.
ssize_t Write(Nic& a, Region& from, fi_addr_t peer, const Region& to, size_t offset, size_t len,
              uint64_t flags) {
  return a.Write(from.bytes.data() + offset, len, from.mr, peer,
                 reinterpret_cast<uint64_t>(to.bytes.data()) + offset, fi_mr_key(to.mr), nullptr,
                 flags);
}

ssize_t Read(Nic& nic, fi_cq_data_entry* entries, size_t n) {
  return fi_cq_read(nic.cq(), entries, n);
}

double Ns(Clock::duration d) { return std::chrono::duration<double, std::nano>(d).count(); }

// Posts `count` writes from a to b in batches (FI_MORE on all but the
// last of each batch when `more`), draining completions; returns ns/post
// spent inside the posting calls.
double PostCost(Nic& a, Region& from, fi_addr_t peer, const Region& to, size_t size, int count,
                bool more) {
  Clock::duration in_post{};
  fi_cq_data_entry entries[64];
  int posted = 0, done = 0;
  while (done < count) {
    int batch = std::min(32, count - posted);
    for (int i = 0; i < batch; ++i) {
      uint64_t flags = FI_COMPLETION | (more && i + 1 < batch ? FI_MORE : 0);
      auto t0 = Clock::now();
      ssize_t ret = Write(a, from, peer, to, 0, size, flags);
      in_post += Clock::now() - t0;
      if (ret != 0) throw std::runtime_error("post failed");
      ++posted;
    }
    while (done < posted) {
      ssize_t n = Read(a, entries, 64);
      if (n > 0) done += static_cast<int>(n);
    }
  }
  return Ns(in_post) / count;
}

// The CPUs this process may use, in order.
std::vector<int> AllowedCpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  return cpus;
}

void PinTo(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
}

// Nanoseconds of one handoff of a cache line between two pinned threads:
// each increments the shared counter when it is its turn.
double LineHandoffNs(int cpu_a, int cpu_b, long handoffs) {
  alignas(64) std::atomic<long> turn{0};
  auto player = [&](int cpu, long parity) {
    PinTo(cpu);
    for (long i = parity; i < handoffs; i += 2) {
      while (turn.load(std::memory_order_acquire) != i) {
      }
      turn.fetch_add(1, std::memory_order_acq_rel);
    }
  };
  auto t0 = Clock::now();
  std::thread a(player, cpu_a, 0), b(player, cpu_b, 1);
  a.join();
  b.join();
  return Ns(Clock::now() - t0) / handoffs;
}

// A chapter-shaped loop on one pinned thread over four NIC pairs: post one
// WRITE on the next NIC, then read every NIC's CQ; the frozen costs in
// force. Prints the primitives line.
int Primitives(size_t size, long writes) {
  std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2) {
    std::fprintf(stderr, "simnic_bench --primitives: needs two CPUs\n");
    return 1;
  }
  for (const char* name : {"SIMNIC_DOORBELL_NS", "SIMNIC_CQ_POLL_NS", "SIMNIC_POST_NS",
                           "SIMNIC_CQ_ENTRY_NS", "SIMNIC_LOCK_LINE_NS", "SIMNIC_REFILL_NS",
                           "SIMNIC_MIGRATE_US", "SIMNIC_REMOTE_NUMA_FACTOR"})
    unsetenv(name);
  setenv("SIMNIC_FIRST_CONTACT_NS", "0", 1);
  setenv("SIMNIC_LINE_GBPS", "1000000", 1);
  setenv("SIMNIC_SCALE", "1", 1);
  constexpr int kNics = 4;
  setenv("SIMNIC_NICS", std::to_string(2 * kNics).c_str(), 1);
  // Engine threads on the CPUs the poster does not use.
  std::string engine_cpus;
  for (size_t i = 1; i < cpus.size(); ++i)
    engine_cpus += (engine_cpus.empty() ? "" : ",") + std::to_string(cpus[i]);
  setenv("SIMNIC_ENGINE_CPUS", engine_cpus.c_str(), 1);
  double line_ns = LineHandoffNs(cpus[0], cpus[1], 2000000);
  PinTo(cpus[0]);
  std::vector<std::unique_ptr<Nic>> nics;
  std::vector<std::unique_ptr<Region>> regions;
  for (int i = 0; i < 2 * kNics; ++i) {
    nics.push_back(std::make_unique<Nic>(i, FI_THREAD_SAFE));
    regions.push_back(std::make_unique<Region>(*nics.back(), 1 << 20));
  }
  std::vector<fi_addr_t> peers;
  for (int k = 0; k < kNics; ++k) peers.push_back(nics[k]->Insert(nics[kNics + k]->address()));
  size_t slots = (1 << 20) / size;
  fi_cq_data_entry entries[16];
  Clock::duration in_post{}, in_read{};
  long posted = 0, done = 0, reads = 0;
  long warmup = writes / 10;
  while (done < writes + warmup) {
    if (done == warmup && posted == done) {
      in_post = in_read = Clock::duration{};
      reads = 0;
    }
    bool timing = done >= warmup;
    if (posted - done < 1000 && posted < writes + warmup && !(posted == warmup && done < warmup)) {
      int k = static_cast<int>(posted % kNics);
      auto t0 = Clock::now();
      ssize_t ret = Write(*nics[k], *regions[k], peers[k], *regions[kNics + k],
                          (posted / kNics % slots) * size, size, FI_COMPLETION);
      if (timing) in_post += Clock::now() - t0;
      if (ret == 0) ++posted;
    }
    for (int k = 0; k < kNics; ++k) {
      auto t0 = Clock::now();
      ssize_t n = Read(*nics[k], entries, 16);
      if (timing) {
        in_read += Clock::now() - t0;
        ++reads;
      }
      if (n > 0) done += n;
    }
  }
  double post_ns = Ns(in_post) / writes;
  double read_ns = Ns(in_read) / reads;
  double entries_per_read = static_cast<double>(writes) / reads;
  std::printf(
      "simnic_primitives {\"post_ns\": %.1f, \"cq_read_ns\": %.1f, \"entries_per_read\": "
      "%.4f, \"post_over_ns\": %.1f, \"cq_read_over_ns\": %.1f, \"line_ns\": %.1f, "
      "\"cpus\": %zu, \"writes\": %ld}\n",
      post_ns, read_ns, entries_per_read,
      post_ns - simnic::costs::kPostNs - simnic::costs::kDoorbellNs,
      read_ns - simnic::costs::kCqPollNs - simnic::costs::kCqEntryNs * entries_per_read, line_ns,
      cpus.size(), writes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t size = 256;
  long writes = 2000000;
  int pairs = 1;
  const char* threads = "2";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--primitives") {
      setenv("SIMNIC_QUIET", "1", 1);
      setenv("SIMNIC_ENGINE_THREADS", "2", 1);
      setenv("SIMNIC_NUMA_NODES", "1", 1);
      try {
        return Primitives(size, 200000);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "simnic_bench: %s\n", e.what());
        return 1;
      }
    }
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--size") size = std::strtoul(argv[i + 1], nullptr, 10);
    if (flag == "--writes") writes = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--pairs") pairs = std::atoi(argv[i + 1]);
    if (flag == "--engine-threads") threads = argv[i + 1];
  }
  setenv("SIMNIC_QUIET", "1", 1);
  setenv("SIMNIC_ENGINE_THREADS", threads, 1);
  setenv("SIMNIC_NICS", std::to_string(2 * pairs).c_str(), 1);
  setenv("SIMNIC_NUMA_NODES", "1", 1);
  try {
    // CPU costs with the model's defaults and with the costs set to 0 (the
    // simulator's own overhead).
    for (fi_threading threading : {FI_THREAD_SAFE, FI_THREAD_DOMAIN}) {
      const char* name = threading == FI_THREAD_SAFE ? "FI_THREAD_SAFE" : "FI_THREAD_DOMAIN";
      for (bool defaults : {false, true}) {
        if (defaults) {
          unsetenv("SIMNIC_DOORBELL_NS");
          unsetenv("SIMNIC_CQ_POLL_NS");
          unsetenv("SIMNIC_POST_NS");
        } else {
          setenv("SIMNIC_DOORBELL_NS", "0", 1);
          setenv("SIMNIC_CQ_POLL_NS", "0", 1);
          setenv("SIMNIC_POST_NS", "0", 1);
        }
        setenv("SIMNIC_LINE_GBPS", "1000000", 1);
        setenv("SIMNIC_SCALE", "1", 1);
        Nic a(0, threading), b(1, threading);
        Region src(a, size), dst(b, size);
        fi_addr_t peer = a.Insert(b.address());
        PostCost(a, src, peer, dst, size, 20000, true);  // warm up
        double with_more = PostCost(a, src, peer, dst, size, 200000, true);
        double without = PostCost(a, src, peer, dst, size, 200000, false);
        fi_cq_data_entry entries[16];
        auto t0 = Clock::now();
        for (int i = 0; i < 200000; ++i) Read(a, entries, 16);
        double poll = Ns(Clock::now() - t0) / 200000;
        std::printf(
            "%s, %s: post with FI_MORE %.0f ns (descriptor + batch share of the doorbell), "
            "post without FI_MORE %.0f ns, empty fi_cq_read %.0f ns\n",
            name, defaults ? "model defaults" : "CPU costs 0 (the simulator's own)", with_more,
            without, poll);
      }
    }
    // The engine's limit: every write moved for real, end to end.
    setenv("SIMNIC_DOORBELL_NS", "0", 1);
    setenv("SIMNIC_CQ_POLL_NS", "0", 1);
    setenv("SIMNIC_POST_NS", "0", 1);
    std::vector<std::unique_ptr<Nic>> nics;
    std::vector<std::unique_ptr<Region>> regions;
    for (int i = 0; i < 2 * pairs; ++i) {
      nics.push_back(std::make_unique<Nic>(i, FI_THREAD_DOMAIN));
      regions.push_back(std::make_unique<Region>(*nics.back(), 1 << 20));
    }
    std::vector<std::thread> posters;
    std::vector<long> done_by(pairs, 0);
    auto start = Clock::now();
    for (int p = 0; p < pairs; ++p) {
      posters.emplace_back([&, p] {
        Nic& a = *nics[2 * p];
        Nic& b = *nics[2 * p + 1];
        Region& from = *regions[2 * p];
        const Region& to = *regions[2 * p + 1];
        fi_addr_t peer = a.Insert(b.address());
        long posted = 0, done = 0, per_pair = writes / pairs;
        size_t slots = (1 << 20) / size;
        fi_cq_data_entry entries[64];
        while (done < per_pair) {
          // Every batch ends with a post without FI_MORE (an open batch stalls).
          long batch = std::min({64L, per_pair - posted, 4000 - (posted - done)});
          for (long i = 0; i < batch; ++i) {
            uint64_t flags = FI_COMPLETION | (i + 1 < batch ? FI_MORE : 0);
            if (Write(a, from, peer, to, (posted % slots) * size, size, flags) != 0) break;
            ++posted;
          }
          ssize_t n = Read(a, entries, 64);
          if (n > 0) done += n;
        }
        done_by[p] = done;
      });
    }
    for (auto& t : posters) t.join();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    long total = 0;
    for (long d : done_by) total += d;
    std::printf(
        "engine: %ld WRITEs of %zu B over %d pair(s), %s engine thread(s): %.2f M/s "
        "(%.1f Gbps), %u cores online\n",
        total, size, pairs, threads, total / seconds / 1e6, total * size * 8 / seconds / 1e9,
        std::thread::hardware_concurrency());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "simnic_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
