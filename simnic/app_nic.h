// One simulated NIC opened as an application opens it (fabric, domain, CQ,
// AV, EQ, endpoint, the chapters' hints), for the programs that drive the
// provider directly: simnic_test (its rules and costs) and simnic_bench (its
// own costs on a machine). Not for the chapters, which use common/.
#ifndef SIMNIC_APP_NIC_H_
#define SIMNIC_APP_NIC_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace simnic_app {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The hints every chapter gives (common/network.cc), for `threading`.
inline fi_info* Hints(fi_threading threading = FI_THREAD_SAFE) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = threading;
  hints->tx_attr->op_flags = FI_COMPLETION;
  hints->fabric_attr->prov_name = strdup("simnic");
  return hints;
}

inline uint32_t ApiVersion() {
  uint32_t headers = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  return std::min(headers, fi_version());
}

// fi_getinfo for simnic under the current environment (the model is read
// at each fi_getinfo).
inline fi_info* GetInfo(fi_info* hints, int* ret, uint32_t version = ApiVersion()) {
  fi_info* info = nullptr;
  *ret = fi_getinfo(version, nullptr, nullptr, 0, hints, &info);
  return info;
}

// One simulated NIC: fabric, domain, CQ, AV, EQ, endpoint.
class Nic {
 public:
  explicit Nic(int index, fi_threading threading = FI_THREAD_SAFE) {
    fi_info* hints = Hints(threading);
    int ret = 0;
    fi_info* list = GetInfo(hints, &ret);
    fi_freeinfo(hints);
    if (ret != 0) throw std::runtime_error(std::string("fi_getinfo: ") + fi_strerror(-ret));
    fi_info* mine = list;
    for (int i = 0; i < index && mine; ++i) mine = mine->next;
    if (mine == nullptr) throw std::runtime_error("no such NIC");
    info_ = fi_dupinfo(mine);
    fi_freeinfo(list);
    Check(fi_fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric");
    Check(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_NONE;
    Check(fi_cq_open(domain_, &cq_attr, &cq_, nullptr), "fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    Check(fi_av_open(domain_, &av_attr, &av_, nullptr), "fi_av_open");
    fi_eq_attr eq_attr{};
    Check(fi_eq_open(fabric_, &eq_attr, &eq_, nullptr), "fi_eq_open");
    Check(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint");
    Check(fi_ep_bind(ep_, &eq_->fid, 0), "fi_ep_bind(eq)");
    Check(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)");
    Check(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    Check(fi_enable(ep_), "fi_enable");
    size_t len = 64;
    address_.resize(len);
    Check(fi_getname(&ep_->fid, address_.data(), &len), "fi_getname");
    address_.resize(len);
  }
  ~Nic() {
    for (fid_mr* mr : mrs_) fi_close(&mr->fid);
    fi_close(&ep_->fid);
    fi_close(&av_->fid);
    fi_close(&cq_->fid);
    fi_close(&eq_->fid);
    fi_close(&domain_->fid);
    fi_close(&fabric_->fid);
    fi_freeinfo(info_);
  }

  static void Check(int ret, const char* what) {
    if (ret != 0) throw std::runtime_error(std::string(what) + ": " + fi_strerror(-ret));
  }

  fid_mr* Register(void* buf, size_t len,
                   uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                                     FI_REMOTE_WRITE) {
    fi_mr_attr attr{};
    iovec iov{buf, len};
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = access;
    attr.iface = FI_HMEM_SYSTEM;
    fid_mr* mr = nullptr;
    Check(fi_mr_regattr(domain_, &attr, 0, &mr), "fi_mr_regattr");
    mrs_.push_back(mr);
    return mr;
  }

  fi_addr_t Insert(const std::vector<uint8_t>& address) {
    fi_addr_t peer = FI_ADDR_UNSPEC;
    int n = fi_av_insert(av_, address.data(), 1, &peer, 0, nullptr);
    if (n != 1) throw std::runtime_error("fi_av_insert: " + std::to_string(n));
    return peer;
  }

  ssize_t Write(const void* buf, size_t len, fid_mr* mr, fi_addr_t peer, uint64_t remote_addr,
                uint64_t key, void* context, uint64_t flags, uint64_t data = 0) {
    iovec iov{const_cast<void*>(buf), len};
    void* desc = fi_mr_desc(mr);
    fi_rma_iov rma{remote_addr, len, key};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = peer;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = context;
    msg.data = data;
    return fi_writemsg(ep_, &msg, flags);
  }

  // Reads completions until `want` arrived or `seconds` passed; error
  // completions are collected separately.
  std::vector<fi_cq_data_entry> Poll(size_t want, double seconds,
                                     std::vector<fi_cq_err_entry>* errors = nullptr) {
    std::vector<fi_cq_data_entry> got;
    auto start = Clock::now();
    while (got.size() + (errors ? errors->size() : 0) < want && SecondsSince(start) < seconds) {
      fi_cq_data_entry entries[16];
      ssize_t n = fi_cq_read(cq_, entries, 16);
      if (n > 0) {
        got.insert(got.end(), entries, entries + n);
      } else if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        if (fi_cq_readerr(cq_, &err, 0) == 1 && errors) errors->push_back(err);
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    return got;
  }

  fid_ep* ep() { return ep_; }
  fid_cq* cq() { return cq_; }
  fid_av* av() { return av_; }
  const fi_info* info() const { return info_; }
  const std::vector<uint8_t>& address() const { return address_; }

 private:
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_eq* eq_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::vector<uint8_t> address_;
  std::vector<fid_mr*> mrs_;
};

}  // namespace simnic_app

#endif  // SIMNIC_APP_NIC_H_
