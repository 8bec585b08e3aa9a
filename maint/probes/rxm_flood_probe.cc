// Whether a receiver whose messages arrive faster than it takes them keeps
// its memory bounded over tcp;ofi_rxm, with and without FI_BUFFERED_RECV.
// A probe to run by hand (docs/protocol.md, "What holds on which provider"):
//
//   rxm_flood_probe [--buffered] [--seconds S] [--consume-us U]
//
// The process forks a flooder: one endpoint that sends 162-byte messages
// (a CONNECT's size) to the receiver as fast as the provider takes them for
// S seconds. The receiver takes one message every U microseconds (a server
// with less CPU than its attacker) and prints, every half second, its
// resident memory, the messages taken and the longest fi_cq_read.
//
// Without --buffered it posts 64 receives and posts each again once taken:
// what rxm takes in beyond them waits on its unexpected list, and rxm posts
// a new buffer to its connection for each (v1.17.0 prov/rxm/src/rxm_cq.c,
// rxm_match_rx_buf -> rxm_replace_rx_buf). With --buffered (hints->mode
// FI_BUFFERED_RECV) rxm hands its own buffer to the receiver
// (rxm_finish_buf_recv) and posts it again only when the receiver discards
// it (rxm_buf_recv with FI_DISCARD -> rxm_free_rx_buf), so what waits is
// bounded by the buffers rxm posts to its message endpoint.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/network.h"

namespace {

using tutorial::FidPtr;
using tutorial::FiInfoPtr;

using Clock = std::chrono::steady_clock;

void Check(long ret, const char* what) {
  if (ret < 0) {
    throw std::runtime_error(std::string(what) + ": " + fi_strerror(static_cast<int>(-ret)));
  }
}

long ResidentKiB() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long pages = 0, resident = 0;
  int got = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return got == 2 ? resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

// One RDM endpoint of tcp;ofi_rxm on the loopback interface; the handles
// close in reverse order of opening, also when opening fails half-way.
class Endpoint {
 public:
  explicit Endpoint(bool buffered) {
    FiInfoPtr hints(fi_allocinfo());
    if (!hints) throw std::runtime_error("fi_allocinfo");
    hints->caps = FI_MSG;
    hints->ep_attr->type = FI_EP_RDM;
    hints->mode = FI_CONTEXT | (buffered ? FI_BUFFERED_RECV : 0);
    hints->fabric_attr->prov_name = strdup("tcp;ofi_rxm");
    hints->domain_attr->name = strdup("lo");
    fi_info* info = nullptr;
    Check(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints.get(), &info), "fi_getinfo");
    info_.reset(info);
    buffered_ = (info_->mode & FI_BUFFERED_RECV) != 0;
    fid_fabric* fabric = nullptr;
    Check(fi_fabric(info_->fabric_attr, &fabric, nullptr), "fi_fabric");
    fabric_.reset(fabric);
    fid_domain* domain = nullptr;
    Check(fi_domain(fabric_.get(), info_.get(), &domain, nullptr), "fi_domain");
    domain_.reset(domain);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    fid_cq* cq = nullptr;
    Check(fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr), "fi_cq_open");
    cq_.reset(cq);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    fid_av* av = nullptr;
    Check(fi_av_open(domain_.get(), &av_attr, &av, nullptr), "fi_av_open");
    av_.reset(av);
    fid_ep* ep = nullptr;
    Check(fi_endpoint(domain_.get(), info_.get(), &ep, nullptr), "fi_endpoint");
    ep_.reset(ep);
    Check(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind cq");
    Check(fi_ep_bind(ep_.get(), &av_->fid, 0), "fi_ep_bind av");
    Check(fi_enable(ep_.get()), "fi_enable");
    char name[256];
    size_t length = sizeof(name);
    Check(fi_getname(&ep_->fid, name, &length), "fi_getname");
    name_.assign(name, name + length);
  }

  fid_ep* ep() const { return ep_.get(); }
  fid_cq* cq() const { return cq_.get(); }
  bool buffered() const { return buffered_; }
  const std::vector<char>& name() const { return name_; }
  fi_addr_t Insert(const std::vector<char>& name) {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    if (fi_av_insert(av_.get(), name.data(), 1, &addr, 0, nullptr) != 1) {
      throw std::runtime_error("fi_av_insert");
    }
    return addr;
  }

 private:
  // Declared in opening order: destroyed (closed) in reverse.
  FiInfoPtr info_;
  FidPtr<fid_fabric> fabric_;
  FidPtr<fid_domain> domain_;
  FidPtr<fid_cq> cq_;
  FidPtr<fid_av> av_;
  FidPtr<fid_ep> ep_;
  std::vector<char> name_;
  bool buffered_ = false;
};

// The child: sends as fast as the provider takes them, 64 at a time.
int Flood(const std::vector<char>& target, double seconds) {
  Endpoint endpoint(false);
  fi_addr_t peer = endpoint.Insert(target);
  std::vector<char> message(162, 'x');
  std::vector<fi_context> contexts(64);
  size_t outstanding = 0, sent = 0;
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  fi_cq_data_entry entries[16];
  while (Clock::now() < end) {
    ssize_t n = fi_cq_read(endpoint.cq(), entries, 16);
    if (n > 0) outstanding -= static_cast<size_t>(n);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(endpoint.cq(), &err, 0);
      if (outstanding > 0) --outstanding;
    }
    while (outstanding < contexts.size()) {
      ssize_t ret = fi_send(endpoint.ep(), message.data(), message.size(), nullptr, peer,
                            &contexts[sent % contexts.size()]);
      if (ret == -FI_EAGAIN) break;
      Check(ret, "fi_send");
      ++outstanding;
      ++sent;
    }
  }
  std::printf("flooder: sent %zu messages in %.0f s\n", sent, seconds);
  std::fflush(stdout);
  return 0;
}

int Receive(bool want_buffered, double seconds, long consume_us) {
  // The flooder is forked before libfabric is opened here; it learns the
  // receiver's name through a pipe.
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe");
  pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork");
  if (child == 0) {
    close(pipe_fds[1]);
    std::vector<char> name(256);
    ssize_t got = read(pipe_fds[0], name.data(), name.size());
    if (got <= 0) _exit(1);
    name.resize(static_cast<size_t>(got));
    try {
      _exit(Flood(name, seconds));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "flooder: %s\n", e.what());
      _exit(1);
    }
  }
  close(pipe_fds[0]);
  Endpoint endpoint(want_buffered);
  std::printf("receiver: tcp;ofi_rxm, FI_BUFFERED_RECV %s, one message every %ld us\n",
              endpoint.buffered() ? "on" : (want_buffered ? "refused" : "off"), consume_us);
  constexpr size_t kSlots = 64, kSlotSize = 8192;
  std::vector<char> buffers(kSlots * kSlotSize);
  std::vector<fi_context> contexts(kSlots);
  auto post = [&](size_t slot) {
    for (;;) {
      ssize_t ret = fi_recv(endpoint.ep(), &buffers[slot * kSlotSize], kSlotSize, nullptr,
                            FI_ADDR_UNSPEC, &contexts[slot]);
      if (ret != -FI_EAGAIN) return Check(ret, "fi_recv");
      fi_cq_read(endpoint.cq(), nullptr, 0);
    }
  };
  if (!endpoint.buffered()) {
    for (size_t slot = 0; slot < kSlots; ++slot) post(slot);
  }
  std::vector<char> name = endpoint.name();
  if (write(pipe_fds[1], name.data(), name.size()) != static_cast<ssize_t>(name.size())) {
    throw std::runtime_error("write to the flooder");
  }
  close(pipe_fds[1]);
  long before = ResidentKiB();
  size_t taken = 0;
  double longest_read = 0;
  auto start = Clock::now(), next_report = start;
  auto end = start + std::chrono::duration<double>(seconds + 3);
  while (Clock::now() < end) {
    fi_cq_data_entry entry{};
    auto read_start = Clock::now();
    ssize_t n = fi_cq_read(endpoint.cq(), &entry, 1);
    longest_read =
        std::max(longest_read, std::chrono::duration<double>(Clock::now() - read_start).count());
    if (n == 1 && (entry.flags & FI_RECV)) {
      ++taken;
      if (consume_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(consume_us));
      if (endpoint.buffered()) {
        // Give rxm its buffer back (fi_msg(3), "Buffered Receives").
        fi_msg msg{};
        msg.context = entry.op_context;
        Check(fi_recvmsg(endpoint.ep(), &msg, FI_DISCARD), "fi_recvmsg FI_DISCARD");
      } else {
        post(static_cast<size_t>(static_cast<fi_context*>(entry.op_context) - contexts.data()));
      }
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(endpoint.cq(), &err, 0);
      std::printf("receiver: error completion: %s\n", fi_strerror(err.err));
    }
    if (Clock::now() >= next_report) {
      next_report += std::chrono::milliseconds(500);
      std::printf("receiver: %5.1f s  RSS %7ld KiB (+%ld)  taken %zu  longest fi_cq_read %.3f s\n",
                  std::chrono::duration<double>(Clock::now() - start).count(), ResidentKiB(),
                  ResidentKiB() - before, taken, longest_read);
      std::fflush(stdout);
      longest_read = 0;
    }
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool buffered = false;
  double seconds = 10;
  long consume_us = 200;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--buffered") {
      buffered = true;
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--consume-us" && i + 1 < argc) {
      consume_us = std::atol(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: rxm_flood_probe [--buffered] [--seconds S (10)] [--consume-us U "
                   "(200)]\n");
      return arg == "--help" ? 0 : 2;
    }
  }
  if (seconds <= 0 || seconds > 600) {
    std::fprintf(stderr, "rxm_flood_probe: --seconds must be in (0, 600]\n");
    return 2;
  }
  try {
    return Receive(buffered, seconds, consume_us);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rxm_flood_probe: %s\n", e.what());
    return 1;
  }
}
