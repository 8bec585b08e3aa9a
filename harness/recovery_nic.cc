// Recovery for one NIC (see recovery_nic.h); why each piece exists:
// docs/provider-failures.md.
#include "harness/recovery_nic.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "common/errors.h"
#include "common/more.h"
#include "common/post_queue.h"
#include "common/setup_hints.h"
#include "common/shm_names.h"

namespace tutorial {
namespace {

bool IsTransmit(const RdmaOp* op) { return op->type != OpType::kRecv; }

// Chapter 18's NICs may hold a batch of WRITEs flagged FI_MORE that only
// the next post rings out (common/more.h).
bool BatchOpen(const Network& net) {
  const auto* more = dynamic_cast<const MoreNetwork*>(&net);
  return more != nullptr && more->batch_open();
}

}  // namespace

NicHarness& NicHarness::Of(Network& net) {
  if (net.hooks == nullptr) throw RuntimeError(net.name() + ": no harness attached");
  return *static_cast<NicHarness*>(net.hooks);
}

const NicHarness& NicHarness::Of(const Network& net) {
  if (net.hooks == nullptr) throw RuntimeError(net.name() + ": no harness attached");
  return *static_cast<const NicHarness*>(net.hooks);
}

bool NicHarness::Deliver(RdmaOp& op) {
  // What the user can do about a failure the machine causes (efa's
  // mismatched installers), said where the failure is reported.
  if (op.error != 0) op.error_message = WithEfaHint(std::move(op.error_message), op, net_.info());
  if (op.type != OpType::kRecv) {
    transmit_completions_.store(transmit_completions_.load(std::memory_order_relaxed) + 1,
                                std::memory_order_relaxed);
  }
  if (silenced_.empty() || silenced_.erase(&op) == 0) return true;
  detached_.erase(&op);
  return false;
}

void NicHarness::CheckPeerAddress(const Network& net, const std::vector<uint8_t>& address) {
  Recovery::CheckPeerAddress(net, address);
}

// A provider's pools (rxm's over tcp in libfabric 1.17: about 80 MiB per
// endpoint) are large blocks
// that glibc's malloc maps on their own, and a closed endpoint unmaps them.
// But glibc raises its mmap threshold to the size of every mapped block
// freed (up to 32 MiB), so the first rebuild moved the new endpoints' pools
// into the heap, where freed blocks stay resident and fragment: the
// server's RSS rose by 7-17% after its first rebuilds, and malloc_trim did
// not give it back (measured with malloc_info). A threshold set
// once, at glibc's default, stays put: every large block stays a mapping
// of its own and goes back to the system when freed. Set before the first
// close; harmless for providers whose pools are small (shm) or pinned (efa).
void Recovery::KeepLargeBlocksMapped() {
#if defined(__GLIBC__)
  static const bool once = [] { return mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1; }();
  (void)once;
#endif
}

void Recovery::ResetEndpoint(Network& net, bool keep_address) {
  if (keep_address) {
    ReopenAt(net, std::vector<uint8_t>(net.address()));
    return;
  }
  Reopen(net, nullptr);
  NicHarness::Of(net).av_damaged_ = false;
  NicHarness::Of(net).reset_wanted_ = false;
}

void Recovery::ReopenAt(Network& net, const std::vector<uint8_t>& address) {
  Reopen(net, &address);
  if (net.address() != address) {
    throw RuntimeError(net.name() + ": the reopened endpoint did not take its address");
  }
  NicHarness::Of(net).av_damaged_ = false;
  NicHarness::Of(net).reset_wanted_ = false;
}

bool Recovery::ClosedEndpointsEndangerDomain(const Network& net) {
  const char* name = net.info().fabric_attr->prov_name;
  return FI_MAJOR(fi_version()) >= 2 && name != nullptr && std::string(name) == "tcp";
}

void Recovery::ResetDomain(Network& net, bool keep_address) {
  const std::vector<uint8_t> address = net.address();
  KeepLargeBlocksMapped();
  CloseEndpoint(net);
  try {
    net.ReopenDomain();
    net.OpenEndpoint(keep_address ? &address : nullptr);
  } catch (const std::runtime_error& e) {
    throw RuntimeError(net.name() + ": cannot reopen the domain and endpoint: " + e.what());
  }
  if (keep_address && net.address() != address) {
    throw RuntimeError(net.name() + ": the reopened endpoint did not take its address");
  }
  NicHarness::Of(net).av_damaged_ = false;
  NicHarness::Of(net).reset_wanted_ = false;
}

void Recovery::Reopen(Network& net, const std::vector<uint8_t>* address) {
  if (net.info().domain_attr->mr_mode & FI_MR_ENDPOINT) {
    throw RuntimeError(net.name() +
                       ": cannot reset the endpoint: the provider binds memory registrations "
                       "to it (FI_MR_ENDPOINT)");
  }
  KeepLargeBlocksMapped();
  CloseEndpoint(net);
  try {
    net.OpenEndpoint(address);
  } catch (const std::runtime_error& e) {
    throw RuntimeError(net.name() +
                       (address ? ": cannot reopen the endpoint at its address: "
                                : ": cannot reopen the endpoint: ") +
                       e.what());
  }
}

namespace {

// shm maps the peer's file when the address is inserted. When it cannot
// (no such endpoint), 1.17 still takes the insert, and if the AV slot held
// a peer before, fi_av_remove left that peer's id behind: the first write
// then dereferences the missing mapping and the process dies (SIGSEGV).
// So the endpoint must exist, and its process live, right before insert.
void CheckShmPeerExists(const std::vector<uint8_t>& address) {
  std::string text(address.begin(), address.end());
  text = text.c_str();  // up to the NUL
  auto name = ParseShmAddress(address);
  if (!name) throw RuntimeError("'" + PrintableName(text) + "' is no shm endpoint name");
  struct stat st {};
  if (stat(("/dev/shm/" + name->file).c_str(), &st) != 0 || st.st_size == 0) {
    throw RuntimeError("no shm endpoint '" + name->file + "' on this host");
  }
  if (ProcessGone(name->pid)) {
    throw RuntimeError("the process of shm endpoint '" + name->file + "' is gone");
  }
}

}  // namespace

void Recovery::CheckPeerAddress(const Network& net, const std::vector<uint8_t>& address) {
  const std::string what = "address of " + std::to_string(address.size()) + " bytes";
  if (address.empty()) throw RuntimeError("empty address");
  switch (net.info().addr_format) {
    case FI_ADDR_STR: {
      // shm reads the name up to its NUL, whatever length we pass.
      if (address.size() < 2 || address.back() != 0) {
        throw RuntimeError(what + " is not a NUL-terminated name, as " +
                           net.info().fabric_attr->prov_name + " addresses are");
      }
      for (size_t i = 0; i + 1 < address.size(); ++i) {
        if (address[i] < 0x20 || address[i] > 0x7e) {
          throw RuntimeError(what + " has a non-printable byte at offset " + std::to_string(i));
        }
      }
      if (std::string(net.info().fabric_attr->prov_name) == "shm") CheckShmPeerExists(address);
      return;
    }
    case FI_SOCKADDR:
    case FI_SOCKADDR_IN:
    case FI_SOCKADDR_IN6: {
      // The AV takes the length from the address family, and one address
      // of another length poisons it for every later insert.
      if (address.size() != net.address().size()) {
        throw RuntimeError(what + " is not a socket address like ours (" +
                           std::to_string(net.address().size()) + " bytes)");
      }
      sockaddr_storage theirs{}, ours{};
      std::memcpy(&theirs, address.data(), std::min(address.size(), sizeof(theirs)));
      std::memcpy(&ours, net.address().data(), std::min(net.address().size(), sizeof(ours)));
      if (theirs.ss_family != ours.ss_family) {
        throw RuntimeError(what + " has address family " + std::to_string(theirs.ss_family) +
                           ", ours is " + std::to_string(ours.ss_family));
      }
      if (theirs.ss_family == AF_INET) {
        const auto& in = reinterpret_cast<const sockaddr_in&>(theirs);
        static const uint8_t kZero[sizeof(in.sin_zero)] = {};
        if (in.sin_port == 0 || in.sin_addr.s_addr == htonl(INADDR_ANY) ||
            std::memcmp(in.sin_zero, kZero, sizeof(kZero)) != 0) {
          throw RuntimeError(what + " is no IPv4 destination (port 0, any-address or padding)");
        }
      } else if (theirs.ss_family == AF_INET6) {
        const auto& in6 = reinterpret_cast<const sockaddr_in6&>(theirs);
        if (in6.sin6_port == 0 || IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
          throw RuntimeError(what + " is no IPv6 destination (port 0 or any-address)");
        }
      }
      return;
    }
    default:
      // EFA and others: fixed-size binary addresses, as long as ours.
      if (address.size() != net.address().size()) {
        throw RuntimeError(what + " does not have the provider's address length (" +
                           std::to_string(net.address().size()) + " bytes)");
      }
  }
}

void Recovery::CancelQueuedTransmits(Network& net) {
  // A batch left open (chapter 18) holds WRITEs the NIC has not been told
  // about: the first queued transmit stays, to be posted without FI_MORE
  // by the next poll, so that the drain can see them complete.
  RdmaOp* closer = nullptr;
  for (RdmaOp* op : TakeQueuedTransmits(net.pending_ops, BatchOpen(net), IsTransmit, &closer)) {
    op->error = FI_ECANCELED;
    op->error_message = fi_strerror(FI_ECANCELED);
    net.failed_ops.push_back(op);
  }
}

size_t Recovery::DetachTransmits(Network& net) {
  NicHarness& harness = NicHarness::Of(net);
  auto forget = [&](RdmaOp* op) {
    harness.silenced_.erase(op);
    net.FreeOp(op);
  };
  // The closer of an open batch stays queued, with nobody to call back:
  // the next poll still rings the doorbell for the WRITEs before it, so
  // they complete and their contexts come back.
  RdmaOp* closer = nullptr;
  for (RdmaOp* op : TakeQueuedTransmits(net.pending_ops, BatchOpen(net), IsTransmit, &closer)) {
    forget(op);
  }
  if (closer != nullptr) harness.silenced_.insert(closer);
  std::deque<RdmaOp*> failed;
  failed.swap(net.failed_ops);
  for (RdmaOp* op : failed) {
    if (IsTransmit(op)) {
      forget(op);
    } else {
      net.failed_ops.push_back(op);
    }
  }
  for (RdmaOp* op = net.in_flight; op != nullptr; op = op->next) {
    if (!op->posted || op->type == OpType::kRecv) continue;
    harness.silenced_.insert(op);
    harness.detached_.insert(op);
  }
  return harness.detached_.size();
}

void Recovery::SilenceTransmits(Network& net) {
  NicHarness& harness = NicHarness::Of(net);
  for (RdmaOp* op = net.in_flight; op != nullptr; op = op->next) {
    if (op->type != OpType::kRecv) harness.silenced_.insert(op);
  }
}

std::string Recovery::TakeEventError(Network& net) {
  uint32_t event = 0;
  fi_eq_err_entry entry{};
  ssize_t ret = fi_eq_read(net.event_queue(), &event, &entry, sizeof(entry), 0);
  if (ret == -FI_EAGAIN || ret >= 0) return "";  // nothing, or no error
  if (ret != -FI_EAVAIL) return net.name() + ": fi_eq_read: " + fi_strerror(static_cast<int>(-ret));
  fi_eq_err_entry err{};
  if (fi_eq_readerr(net.event_queue(), &err, 0) < 0)
    return net.name() + ": an unreadable event queue error";
  int error = err.err < 0 ? -err.err : err.err;
  std::string message = net.name() + ": " + fi_strerror(error);
  const char* detail = fi_eq_strerror(net.event_queue(), err.prov_errno, err.err_data, nullptr, 0);
  if (detail != nullptr && *detail) message += std::string(" (") + detail + ")";
  return message;
}

}  // namespace tutorial
