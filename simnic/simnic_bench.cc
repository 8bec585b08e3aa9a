// Measures the model's own costs on this machine, through libfabric as an
// application sees it (not a test: numbers, no verdicts):
//   post      one fi_writemsg with FI_MORE (the descriptor only)
//   doorbell  one fi_writemsg without FI_MORE, minus a post
//   cq poll   one fi_cq_read of an empty CQ
//   engine    WRITEs a second the engine threads move end to end between
//             pairs of NICs in this process, line rate unlimited, CPU costs 0
//
//   bazel build //simnic:simnic_bench //simnic:libsimnic-fi.so
//   FI_PROVIDER_PATH=$PWD/bazel-bin/simnic bazel-bin/simnic/simnic_bench [--size 256]
//       [--writes 2000000] [--pairs 1] [--engine-threads 2]
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void Check(int ret, const char* what) {
  if (ret != 0) throw std::runtime_error(std::string(what) + ": " + fi_strerror(-ret));
}

class Nic {
 public:
  Nic(int index, fi_threading threading) {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = threading;
    hints->fabric_attr->prov_name = strdup("simnic");
    fi_info* list = nullptr;
    Check(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), "fi_getinfo");
    fi_freeinfo(hints);
    fi_info* mine = list;
    for (int i = 0; i < index; ++i) mine = mine->next;
    info_ = fi_dupinfo(mine);
    fi_freeinfo(list);
    Check(fi_fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric");
    Check(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    Check(fi_cq_open(domain_, &cq_attr, &cq_, nullptr), "fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    Check(fi_av_open(domain_, &av_attr, &av_, nullptr), "fi_av_open");
    fi_eq_attr eq_attr{};
    Check(fi_eq_open(fabric_, &eq_attr, &eq_, nullptr), "fi_eq_open");
    Check(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint");
    Check(fi_ep_bind(ep_, &eq_->fid, 0), "bind eq");  // simnic, like EFA, wants one
    Check(fi_ep_bind(ep_, &av_->fid, 0), "bind av");
    Check(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "bind cq");
    Check(fi_enable(ep_), "fi_enable");
    size_t len = sizeof(address_);
    Check(fi_getname(&ep_->fid, address_, &len), "fi_getname");
  }
  ~Nic() {
    if (mr_) fi_close(&mr_->fid);
    fi_close(&ep_->fid);
    fi_close(&av_->fid);
    fi_close(&eq_->fid);
    fi_close(&cq_->fid);
    fi_close(&domain_->fid);
    fi_close(&fabric_->fid);
    fi_freeinfo(info_);
  }
  void Register(std::vector<uint8_t>& buf) {
    fi_mr_attr attr{};
    iovec iov{buf.data(), buf.size()};
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    Check(fi_mr_regattr(domain_, &attr, 0, &mr_), "fi_mr_regattr");
    base_ = buf.data();
  }
  fi_addr_t Insert(const Nic& other) {
    fi_addr_t a = 0;
    if (fi_av_insert(av_, other.address_, 1, &a, 0, nullptr) != 1) throw std::runtime_error("av");
    return a;
  }
  ssize_t Write(size_t offset, size_t len, const Nic& target, fi_addr_t peer, uint64_t flags) {
    iovec iov{base_ + offset, len};
    void* desc = fi_mr_desc(mr_);
    fi_rma_iov rma{reinterpret_cast<uint64_t>(target.base_) + offset, len, fi_mr_key(target.mr_)};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = peer;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    return fi_writemsg(ep_, &msg, flags);
  }
  ssize_t Read(fi_cq_data_entry* entries, size_t n) { return fi_cq_read(cq_, entries, n); }

 private:
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_eq* eq_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_mr* mr_ = nullptr;
  uint8_t* base_ = nullptr;
  uint8_t address_[64];
};

double Ns(Clock::duration d) { return std::chrono::duration<double, std::nano>(d).count(); }

// Posts `count` writes from a to b in batches (FI_MORE on all but the
// last of each batch when `more`), draining completions; returns ns/post
// spent inside the posting calls.
double PostCost(Nic& a, Nic& b, fi_addr_t peer, size_t size, int count, bool more) {
  Clock::duration in_post{};
  fi_cq_data_entry entries[64];
  int posted = 0, done = 0;
  while (done < count) {
    int batch = std::min(32, count - posted);
    for (int i = 0; i < batch; ++i) {
      uint64_t flags = FI_COMPLETION | (more && i + 1 < batch ? FI_MORE : 0);
      auto t0 = Clock::now();
      ssize_t ret = a.Write(0, size, b, peer, flags);
      in_post += Clock::now() - t0;
      if (ret != 0) throw std::runtime_error("post failed");
      ++posted;
    }
    while (done < posted) {
      ssize_t n = a.Read(entries, 64);
      if (n > 0) done += static_cast<int>(n);
    }
  }
  return Ns(in_post) / count;
}

}  // namespace

int main(int argc, char** argv) {
  size_t size = 256;
  long writes = 2000000;
  int pairs = 1;
  const char* threads = "2";
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
        std::vector<uint8_t> src(size), dst(size);
        a.Register(src);
        b.Register(dst);
        fi_addr_t peer = a.Insert(b);
        PostCost(a, b, peer, size, 20000, true);  // warm up
        double with_more = PostCost(a, b, peer, size, 200000, true);
        double without = PostCost(a, b, peer, size, 200000, false);
        fi_cq_data_entry entries[16];
        auto t0 = Clock::now();
        for (int i = 0; i < 200000; ++i) a.Read(entries, 16);
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
    std::vector<std::vector<uint8_t>> buffers(2 * pairs, std::vector<uint8_t>(1 << 20));
    for (int i = 0; i < 2 * pairs; ++i) {
      nics.push_back(std::make_unique<Nic>(i, FI_THREAD_DOMAIN));
      nics.back()->Register(buffers[i]);
    }
    std::vector<std::thread> posters;
    std::vector<long> done_by(pairs, 0);
    auto start = Clock::now();
    for (int p = 0; p < pairs; ++p) {
      posters.emplace_back([&, p] {
        Nic& a = *nics[2 * p];
        Nic& b = *nics[2 * p + 1];
        fi_addr_t peer = a.Insert(b);
        long posted = 0, done = 0, per_pair = writes / pairs;
        size_t slots = (1 << 20) / size;
        fi_cq_data_entry entries[64];
        while (done < per_pair) {
          // Every batch ends with a post without FI_MORE (an open batch stalls).
          long batch = std::min({64L, per_pair - posted, 4000 - (posted - done)});
          for (long i = 0; i < batch; ++i) {
            uint64_t flags = FI_COMPLETION | (i + 1 < batch ? FI_MORE : 0);
            if (a.Write((posted % slots) * size, size, b, peer, flags) != 0) break;
            ++posted;
          }
          ssize_t n = a.Read(entries, 64);
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
