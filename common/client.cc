#include "common/client.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "common/errors.h"
#include "common/front_door.h"
#include "common/messages.h"
#include "common/node.h"
#include "common/options.h"
#include "common/progress.h"
#include "common/random_fill.h"
#include "common/result_json.h"
#include "harness/main_guard.h"
#include "harness/recovery.h"
#include "harness/shutdown.h"
#include "harness/thread_stats.h"

namespace tutorial {
namespace {

// A provider call that has not returned after this long never will.
constexpr double kStuckSeconds = 10.0;
// While it waits for the server's writes, the client asks the server's
// front door every kProbeSeconds whether it still lives (PROBE); a server
// that answers nothing for kServerGoneSeconds is gone (tcp and efa tell a
// client nothing when its server dies; shm names the process).
constexpr double kProbeSeconds = 2.0;
constexpr double kServerGoneSeconds = 10.0;
// A CONNECT that the server answers with neither its cookies (a CHALLENGE
// to every NIC) nor BUSY within this long may have been lost: the client
// sends it again, in the same session (the server sends the same cookies
// again), until the server has been silent for kServerGoneSeconds.
constexpr double kChallengeSeconds = 3.0;

// Over tcp on libfabric 1.x the server's front door takes each message in
// one of ofi_rxm's own buffers (common/front_door.h): a longer message is
// never taken, and its send never completes. Such a request is refused
// before it is sent. ofi_rxm's buffer (FI_OFI_RXM_BUFFER_SIZE) holds its
// own header too, hence the margin and "about".
void CheckFitsProviderBuffers(const fi_info& info, size_t length) {
  const char* provider = info.fabric_attr->prov_name;
  if (provider == nullptr || !FrontDoorNetwork::WantsBufferedReceives(fi_version(), provider)) {
    return;
  }
  const char* set = std::getenv("FI_OFI_RXM_BUFFER_SIZE");
  const long long set_size = set != nullptr ? std::atoll(set) : 0;
  const size_t buffer = set_size > 0 ? static_cast<size_t>(set_size) : 16384;
  if (length + 256 < buffer) return;
  throw UsageError("--pages: this RANDOM_FILL is " + std::to_string(length) +
                   " bytes; over tcp on libfabric 1.x a server takes messages of at most about " +
                   std::to_string(buffer / 1024) + " KiB: ask for fewer pages");
}

class RandomFillClient {
 public:
  RandomFillClient(const ClientOptions& options, const std::string& chapter, Node& node)
      : options_(options),
        chapter_(chapter),
        node_(node),
        nic0_(node.net(0, 0)),
        send_buffer_(Buffer::Allocate(MemoryKind::kHost, -1, kMaxMessageSize)),
        send_region_(nic0_.Register(send_buffer_)),
        reply_buffer_(Buffer::Allocate(MemoryKind::kHost, -1, kMaxRejectReason + 64)),
        reply_region_(nic0_.Register(reply_buffer_)),
        probe_buffer_(Buffer::Allocate(MemoryKind::kHost, -1, 64 + kMaxAddressLength)),
        probe_region_(nic0_.Register(probe_buffer_)) {
    // Where the server's replies go; each attempt picks its own nonce.
    session_.address = nic0_.address();
    // Every other NIC hears its own CHALLENGE: one inbox on each whose
    // address no earlier NIC has (the server sends one per address).
    std::vector<std::vector<uint8_t>> seen{session_.address};
    for (size_t i = 1; i < num_nics_; ++i) {
      Network& net = node_.net(i / node_.nics_per_gpu(), i % node_.nics_per_gpu());
      if (std::find(seen.begin(), seen.end(), net.address()) != seen.end()) continue;
      seen.push_back(net.address());
      Buffer buffer = Buffer::Allocate(MemoryKind::kHost, -1, kChallengeInboxSize);
      MemoryRegion region = net.Register(buffer);
      inboxes_.emplace_back(i, std::move(buffer), std::move(region));
    }
  }

  // The client is the node's last user: its endpoints close before any
  // registration or buffer goes away, so a server still writing (or a
  // late REJECT) cannot land in freed memory.
  ~RandomFillClient() {
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n) Recovery::CloseEndpoint(node_.net(g, n));
    }
    // However the client ends: a server killed with SIGKILL left its files.
    if (!server_address_.empty()) RemoveFilesOfDeadPeers(nic0_, {server_address_});
  }

  int Run() {
    server_address_ = FromHex(options_.server);
    const std::vector<uint8_t>& server_address = server_address_;
    fi_addr_t& server = server_;
    try {
      server = nic0_.AddPeer(server_address);
    } catch (const std::runtime_error& e) {
      throw UsageError(std::string("--server: ") + e.what());
    }

    RandomFillRequest request = MakeRequest();
    CheckFitsProviderBuffers(nic0_.info(), Encode(request, session_).size());
    remote_context_ = request.remote_context;
    last_reply_at_ = Clock::now();
    ListenForReply();
    for (size_t k = 0; k < inboxes_.size(); ++k) ListenForChallenge(k);
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n) {
        node_.net(g, n).OnRemoteWrite([this, &request](Network&, uint64_t data) {
          if (data == request.remote_context) ++notices_;
        });
      }
    }

    // A server that is busy with another client, or recovering from one,
    // answers BUSY: we ask again, waiting longer each time, for as long as
    // --timeout allows in all.
    const auto run_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(options_.timeout));
    constexpr double kFirstWait = 0.25, kLongestWait = 5.0;
    double wait = kFirstWait;
    std::minstd_rand jitter(std::random_device{}());
    size_t expected = node_.num_gpus() * node_.nics_per_gpu();
    Clock::time_point start;
    for (int attempt = 1;; ++attempt) {
      // A client stopped before it said anything sends nothing (shm would
      // queue our name at the server: harness/recovery.h, bug B).
      if (StopRequested()) throw RuntimeError("interrupted before sending CONNECT");
      NewSession();
      // The server writes only to a client that proved it receives at
      // every address it declared: it sends a cookie to each, and the
      // RANDOM_FILL carries their XOR (one more round trip).
      try {
        if (ConnectForCookie(run_deadline)) {
          request.cookie = CookiesXor();
          start = Clock::now();
          Send(server, Encode(request, session_), "RANDOM_FILL");
          std::printf(
              "Sent RANDOM_FILL: %zu page(s) of %llu bytes per buffer, seed %llu. Waiting for "
              "the server's writes...\n",
              request.page_indices.size(), static_cast<unsigned long long>(request.page_size),
              static_cast<unsigned long long>(request.seed));
          std::fflush(stdout);
          if (WaitForNotices(expected, run_deadline)) break;
        }
      } catch (const ConnectionStuck&) {
        RenewNic0();
        continue;  // at once, in a new session
      }
      double left = std::chrono::duration<double>(run_deadline - Clock::now()).count();
      if (left <= 0) {
        throw RuntimeError("the server stayed busy for the whole --timeout (" +
                           FormatSeconds(options_.timeout) + " s): " + busy_reason_);
      }
      // Jittered (0.5-1.5 x): clients told BUSY at the same moment must not
      // ask again at the same moment, or they keep meeting at the front door.
      double pause =
          std::min(wait * std::uniform_real_distribution<double>(0.5, 1.5)(jitter), left);
      std::printf(
          "The server is busy (%s): asking again in %.2f s (attempt %d; giving up after "
          "--timeout %s s in all).\n",
          busy_reason_.c_str(), pause, attempt + 1, FormatSeconds(options_.timeout).c_str());
      std::fflush(stdout);
      PauseWhilePolling(pause);
      wait = std::min(wait * 2, kLongestWait);
    }
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("All %zu NIC(s) reported the last write after %.3f s.\n", expected, seconds);
    return Verify(request, seconds);
  }

 private:
  static std::string FormatSeconds(double seconds) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", seconds);
    return text;
  }

  // A new session for every attempt: a new random nonce (the kernel's, not
  // a guessable sequence), so that a late reply to an older attempt (a
  // BUSY, a CHALLENGE) names another session and is ignored. Only the main
  // thread polls between attempts, so the reply callback sees either nonce
  // whole.
  void NewSession() {
    session_.nonce = UnpredictableNonZero64();
    recent_nonces_[recent_next_++ % recent_nonces_.size()] = session_.nonce;
    cookie_ = 0;
    for (ChallengeInbox& inbox : inboxes_) inbox.cookie = 0;
    busy_flag_ = false;
    notices_ = 0;
  }

  // Sends CONNECT; true once the server sent this session its cookies (a
  // CHALLENGE to NIC 0 and one to every other NIC), false when it answered
  // BUSY or --timeout is over. A CONNECT that hears nothing for
  // kChallengeSeconds is sent again in the same session, so that a
  // CHALLENGE that was only slow still counts. A REJECT ends the client
  // (PollAll); so does a server that answered nothing at all for
  // kServerGoneSeconds, or whose process is gone (shm).
  bool ConnectForCookie(Clock::time_point deadline) {
    const std::vector<uint8_t> connect = Encode(MakeConnect(), session_);
    Send(server_, connect, "CONNECT");
    const auto challenge_wait = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(kChallengeSeconds));
    auto resend = Clock::now() + challenge_wait;
    auto next_liveness_check = Clock::now() + std::chrono::milliseconds(100);
    while (true) {
      PollAll();
      if (HaveEveryCookie()) return true;
      if (busy_flag_.exchange(false)) return false;
      if (StopRequested()) throw RuntimeError("interrupted while waiting for the server's cookie");
      auto now = Clock::now();
      if (now >= next_liveness_check) {
        next_liveness_check = now + std::chrono::milliseconds(100);
        if (PeerKnownDead(nic0_, server_address_)) {
          RemoveFilesOfDeadPeers(nic0_, {server_address_});
          throw RuntimeError("the server (process " +
                             std::to_string(PeerProcess(nic0_, server_address_)) +
                             ") is gone: it stopped or died before it answered our CONNECT");
        }
      }
      if (now >= deadline) {
        busy_reason_ = "no cookie (CHALLENGE) for every NIC of our CONNECT";
        return false;
      }
      if (now >= resend) {
        if (now - last_reply_at_.load() > std::chrono::duration<double>(kServerGoneSeconds)) {
          throw RuntimeError("the server stopped answering: no reply to our CONNECTs for " +
                             FormatSeconds(kServerGoneSeconds) +
                             " s; it died, lost its network, or is not a server of this tutorial");
        }
        Send(server_, connect, "CONNECT");
        resend = Clock::now() + challenge_wait;
      }
      std::this_thread::yield();
    }
  }

  // Waits `seconds` while NIC 0 keeps progressing (a provider may need it
  // to finish what it sent); a stop request ends the wait at once.
  void PauseWhilePolling(double seconds) {
    auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      PollAll();
      if (StopRequested()) throw RuntimeError("interrupted while waiting for a busy server");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Polls every NIC (the server's writes need the target's progress on
  // some providers) and stops at once if the server rejected the request.
  void PollAll() {
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n) node_.net(g, n).PollCompletion();
    }
    if (EventCheckDue(&next_event_check_)) {
      for (size_t g = 0; g < node_.num_gpus(); ++g) ThrowIfEventError(g, 0, node_.nics_per_gpu());
    }
    ThrowIfRejected();
  }

  // The NICs' event queues, read every 100 ms: an error there
  // (EFA: one of the provider's own operations failed) ends the client in
  // one line instead of its --timeout.
  static bool EventCheckDue(Clock::time_point* next) {
    auto now = Clock::now();
    if (now < *next) return false;
    *next = now + std::chrono::milliseconds(100);
    return true;
  }
  void ThrowIfEventError(size_t gpu, size_t first, size_t count) {
    for (size_t n = first; n < first + count; ++n) {
      std::string error = Recovery::TakeEventError(node_.net(gpu, n));
      if (!error.empty()) throw RuntimeError("a NIC reported an error: " + error);
    }
  }

  void ThrowIfRejected() const {
    if (!rejected_flag_.load(std::memory_order_acquire)) return;
    const std::string abandoned = kTransferAbandonedReason;
    if (rejected_.rfind(abandoned, 0) == 0) {
      // Not our request's fault: the transfer failed on the server's side.
      throw RuntimeError("the server abandoned the transfer: " +
                         rejected_.substr(abandoned.size()));
    }
    throw UsageError("the server rejected the request: " + rejected_);
  }

  // Waits for the final write of every NIC. One thread per GPU group polls
  // that group's NICs (or, with --poll-threads nic, one thread per NIC): shm
  // moves data in the target's progress calls (its CUDA IPC copies too), so
  // a single thread polling every NIC would make the client, not the server,
  // the bottleneck. (The series' client polls every NIC from its one main
  // thread: on EFA the NIC moves the data, so the target's CPU has little to
  // do.) One thread per group is our default; a thread per NIC helps shm
  // with CUDA memory only when libfabric was built to copy on per-thread
  // streams (results/h200x2-shm-cuda).
  // Returns false when the server answered BUSY instead.
  bool WaitForNotices(size_t expected, Clock::time_point deadline) {
    std::atomic<bool> stop{false};
    heard_at_ = Clock::time_point{};  // the server's silence counts from now
    probes_unanswered_ = 0;
    next_probe_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(kProbeSeconds));
    std::mutex error_mutex;
    std::string error;
    std::vector<std::thread> threads;
    bool thread_per_nic = options_.poll_threads == "nic";
    // --poll-threads one: a single thread sweeps every NIC of every group,
    // and sleeps a little after sweeps that found nothing (the notices come
    // at the very end; the simulated NIC moves the data without it).
    bool one_thread = options_.poll_threads == "one";
    size_t nics_per_thread = thread_per_nic ? 1 : node_.nics_per_gpu();
    size_t groups_per_thread = one_thread ? node_.num_gpus() : 1;
    // The writes carry no notice until each NIC's last one, so a long run
    // would look hung: the first thread says every kWaitReport that the
    // client is alive.
    constexpr auto kWaitReport = std::chrono::seconds(10);
    auto start = Clock::now();
    for (size_t g = 0; g < node_.num_gpus(); g += groups_per_thread) {
      for (size_t first = 0; first < node_.nics_per_gpu(); first += nics_per_thread) {
        threads.emplace_back([&, g, first, reports = threads.empty()] {
          NameThisThread(thread_per_nic
                             ? "poller-g" + std::to_string(g) + "n" + std::to_string(first)
                             : "poller-g" + std::to_string(g));
          try {
            MakeCudaDeviceCurrent(node_.groups()[g].cuda_device);
            auto next_report = start + kWaitReport;
            auto next_liveness_check = start;
            int idle_sweeps = 0;
            auto next_event_check = start;
            while (!stop.load(std::memory_order_relaxed)) {
              size_t handled = 0;
              for (size_t gg = g; gg < g + groups_per_thread; ++gg) {
                for (size_t n = first; n < first + nics_per_thread; ++n) {
                  handled += node_.net(gg, n).PollCompletion();
                }
              }
              if (one_thread) {
                // Back off when idle: 64 empty sweeps, then sleeps of 50 us
                // growing to 1 ms; any completion starts over.
                idle_sweeps = handled > 0 ? 0 : idle_sweeps + 1;
                if (idle_sweeps > 64) {
                  std::this_thread::sleep_for(
                      std::chrono::microseconds(std::min(1000, 50 * (idle_sweeps - 64))));
                }
              }
              if (EventCheckDue(&next_event_check)) {
                for (size_t gg = g; gg < g + groups_per_thread; ++gg) {
                  ThrowIfEventError(gg, first, nics_per_thread);
                }
              }
              auto now = Clock::now();
              if (notices_.load(std::memory_order_relaxed) >= expected ||
                  rejected_flag_.load(std::memory_order_acquire) ||
                  busy_flag_.load(std::memory_order_acquire) || StopRequested() || now > deadline) {
                stop = true;
              } else if (reports && now >= next_liveness_check) {
                // Where the provider's addresses name a process (shm), a
                // server that died is told at once, not by the deadline;
                // elsewhere the server's silence to our PROBEs tells.
                next_liveness_check = now + std::chrono::seconds(1);
                if (PeerKnownDead(nic0_, server_address_)) {
                  server_gone_ = true;
                  stop = true;
                } else if (ServerSilent(now)) {
                  server_silent_ = true;
                  stop = true;
                }
              } else if (reports && now >= next_report) {
                next_report += kWaitReport;
                std::printf(
                    "Still waiting after %.0f s: %zu of %zu NIC(s) reported their last "
                    "write.\n",
                    std::chrono::duration<double>(now - start).count(), notices_.load(), expected);
                std::fflush(stdout);
              }
            }
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(error_mutex);
            if (error.empty()) error = e.what();
            stop = true;
          }
        });
      }
    }
    for (auto& t : threads) t.join();
    ThrowIfRejected();
    if (!error.empty()) throw RuntimeError(error);
    if (notices_ >= expected) return true;
    if (busy_flag_.exchange(false)) return false;
    if (StopRequested()) {
      SayWeAreLeaving();
      throw RuntimeError("interrupted while waiting for the server");
    }
    if (server_silent_) {
      throw RuntimeError("the server stopped answering: nothing for " +
                         FormatSeconds(kServerGoneSeconds) + " s, " +
                         std::to_string(probes_unanswered_) + " PROBE(s) sent since (" +
                         std::to_string(notices_.load()) + " of " + std::to_string(expected) +
                         " NICs had reported); it died or lost its network");
    }
    if (server_gone_) {
      RemoveFilesOfDeadPeers(nic0_, {server_address_});
      throw RuntimeError(
          "the server (process " + std::to_string(PeerProcess(nic0_, server_address_)) +
          ") is gone: it stopped or died during the transfer (" + std::to_string(notices_.load()) +
          " of " + std::to_string(expected) + " NICs had reported)");
    }
    RemoveFilesOfDeadPeers(nic0_, {server_address_});
    // A server that died or lost us sends nothing more; RDM endpoints give
    // no sign of it, so the deadline is what tells.
    char waited[32];
    std::snprintf(waited, sizeof(waited), "%g", options_.timeout);
    throw RuntimeError(std::string("timed out after ") + waited +
                       " s waiting for the server's writes (" + std::to_string(notices_.load()) +
                       " of " + std::to_string(expected) +
                       " NICs reported); is the server still running?");
  }

  // Sends a PROBE now and then (from the thread that polls NIC 0, its only
  // user while the client waits) and says whether the server has answered
  // nothing, ALIVE or anything else, for kServerGoneSeconds.
  bool ServerSilent(Clock::time_point now) {
    // shm names the server's process (PeerKnownDead tells sooner).
    if (PeerProcess(nic0_, server_address_) > 0) return false;
    if (heard_at_ == Clock::time_point{}) heard_at_ = now;
    if (heard_.exchange(false)) {
      heard_at_ = now;
      probes_unanswered_ = 0;
    }
    if (!probe_in_flight_.load() && now >= next_probe_) {
      next_probe_ = now + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(kProbeSeconds));
      std::vector<uint8_t> probe = EncodeEmpty(MessageType::kProbe, session_);
      probe_buffer_.CopyFromHost(0, probe.data(), probe.size());
      probe_in_flight_ = true;
      ++probes_unanswered_;
      // The callback touches members only: it may run after this wait.
      nic0_.PostSend(server_, probe_buffer_.data(), probe.size(), probe_region_.desc(),
                     [this](Network&, RdmaOp&) { probe_in_flight_ = false; });
    }
    return now - heard_at_ > std::chrono::duration<double>(kServerGoneSeconds);
  }

  // The server's answer, if any: a REJECT (which ends the run), a BUSY
  // (ask again later), NIC 0's CHALLENGE (a cookie our RANDOM_FILL
  // carries) or an ALIVE (a PROBE's answer). One receive, posted once and again after
  // every reply but a REJECT; a reply that names another session (an older
  // attempt's, or nobody's: a server's reply carries the nonce of the
  // session it answers) is ignored.
  void ListenForReply() {
    nic0_.PostRecv(reply_buffer_.data(), reply_buffer_.size(), reply_region_.desc(),
                   [this](Network&, RdmaOp& op) {
                     if (!op.ok()) return;
                     const auto* data = static_cast<const uint8_t*>(reply_buffer_.data());
                     try {
                       MessageHeader header = DecodeHeader(data, op.received);
                       if (header.session.nonce != session_.nonce) {
                         // Not about this attempt's session; one of an
                         // older attempt still says the server lives.
                         for (uint64_t nonce : recent_nonces_) {
                           if (nonce != 0 && nonce == header.session.nonce) {
                             last_reply_at_ = Clock::now();
                           }
                         }
                         ListenForReply();
                         return;
                       }
                       if (header.type == MessageType::kChallenge) {
                         uint64_t cookie = DecodeChallenge(data, op.received).cookie;
                         last_reply_at_ = Clock::now();
                         cookie_ = cookie;  // the latest (ListenForChallenge)
                         ListenForReply();
                         return;
                       }
                       heard_ = true;
                       last_reply_at_ = Clock::now();
                       if (header.type == MessageType::kAlive) {
                         ListenForReply();
                         return;
                       }
                       if (header.type == MessageType::kBusy) {
                         busy_reason_ = DecodeBusy(data, op.received).reason;
                         busy_flag_.store(true, std::memory_order_release);
                         ListenForReply();
                         return;
                       }
                     } catch (const ProtocolError&) {
                       // Not a BUSY: read as a REJECT below, which says why.
                     }
                     try {
                       rejected_ = DecodeReject(data, op.received).reason;
                     } catch (const ProtocolError& e) {
                       rejected_ = std::string("(unreadable reply: ") + e.what() + ")";
                     }
                     if (rejected_.empty()) rejected_ = "(no reason given)";
                     rejected_flag_.store(true, std::memory_order_release);
                   });
  }

  bool HaveEveryCookie() const {
    if (cookie_.load() == 0) return false;
    for (const ChallengeInbox& inbox : inboxes_) {
      if (inbox.cookie.load() == 0) return false;
    }
    return true;
  }

  uint64_t CookiesXor() const {
    uint64_t sum = cookie_.load();
    for (const ChallengeInbox& inbox : inboxes_) sum ^= inbox.cookie.load();
    return sum;
  }

  // The CHALLENGE of this attempt's session that reaches NIC inboxes_[k]:
  // one receive, posted again after everything that arrives (anything else,
  // or another session's, is ignored). The latest CHALLENGE counts: a
  // server that lost our CONNECT's first CHALLENGEs sends new cookies.
  void ListenForChallenge(size_t k) {
    ChallengeInbox& inbox = inboxes_[k];
    Network& net = node_.net(inbox.nic / node_.nics_per_gpu(), inbox.nic % node_.nics_per_gpu());
    net.PostRecv(inbox.buffer.data(), inbox.buffer.size(), inbox.region.desc(),
                 [this, k](Network&, RdmaOp& op) {
                   if (!op.ok() && op.error != FI_ETRUNC) return;  // closing, or broken
                   if (op.ok()) {
                     const auto* data = static_cast<const uint8_t*>(inboxes_[k].buffer.data());
                     try {
                       MessageHeader header = DecodeHeader(data, op.received);
                       if (header.type == MessageType::kChallenge &&
                           header.session.nonce == session_.nonce) {
                         inboxes_[k].cookie = DecodeChallenge(data, op.received).cookie;
                       }
                     } catch (const ProtocolError&) {
                       // Not a CHALLENGE: nobody else has anything to say here.
                     }
                   }
                   ListenForChallenge(k);
                 });
  }

  ConnectMessage MakeConnect() const {
    ConnectMessage m;
    m.num_gpus = static_cast<uint32_t>(node_.num_gpus());
    m.nics_per_gpu = static_cast<uint32_t>(node_.nics_per_gpu());
    m.buffers_per_gpu = node_.buffers_per_gpu();
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n) {
        m.nic_addresses.push_back(node_.net(g, n).address());
        for (uint32_t b = 0; b < node_.buffers_per_gpu(); ++b) {
          const MemoryRegion& region = node_.region(g, n, b);
          m.regions.push_back(RemoteRegion{region.remote_addr(), region.size(), region.key()});
        }
      }
    }
    return m;
  }

  RandomFillRequest MakeRequest() const {
    RandomFillRequest r;
    r.seed = options_.seed != 0
                 ? options_.seed
                 : static_cast<uint64_t>(Clock::now().time_since_epoch().count()) | 1;
    r.remote_context = static_cast<uint32_t>(RandomStream(r.seed, 0xC0, 0x7E).Word(0)) | 1;
    r.page_size = options_.page_size;
    r.page_indices =
        SamplePageSlots(r.seed, node_.buffer_size() / options_.page_size, options_.pages);
    return r;
  }

  // SENDs one message on NIC 0 and waits, bounded by --connect-timeout, for
  // the provider to report it delivered. A send canceled under us (over
  // tcp, closing a connection flushes the sends queued on it with
  // FI_ECANCELED) is sent again, kCanceledResends times at most.
  void Send(fi_addr_t server, const std::vector<uint8_t>& message, const char* what) {
    constexpr int kCanceledResends = 3;
    for (int resend = 0;; ++resend) {
      if (SendOnce(server, message, what, resend < kCanceledResends)) return;
      std::printf(
          "The provider canceled our %s (the server closed its connection): sending it "
          "again.\n",
          what);
      std::fflush(stdout);
      PauseWhilePolling(0.1);
    }
  }

  // Send's one try: true when delivered, false when canceled and
  // `may_resend`; throws otherwise.
  bool SendOnce(fi_addr_t server, const std::vector<uint8_t>& message, const char* what,
                bool may_resend) {
    send_buffer_.CopyFromHost(0, message.data(), message.size());
    bool done = false;
    std::string error;
    int error_code = 0;
    // A send the provider refuses outright comes back as a failed
    // completion at the next poll.
    nic0_.PostSend(server, send_buffer_.data(), message.size(), send_region_.desc(),
                   [&](Network&, RdmaOp& op) {
                     done = true;
                     error_code = op.error;
                     if (!op.ok()) error = op.error_message;
                   });
    auto deadline = Clock::now() + std::chrono::duration<double>(options_.connect_timeout);
    // Interrupted, we still wait a moment for the send: until it goes out,
    // shm may have our name queued at the server, and our endpoint must not
    // vanish before the server read it (docs/provider-failures.md, point 3).
    constexpr auto kInterruptGrace = std::chrono::seconds(3);
    std::optional<Clock::time_point> interrupted_at;
    const auto renew_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(kNotTakenSeconds));
    while (!done) {
      PollAll();
      auto now = Clock::now();
      if (StopRequested() && !interrupted_at) interrupted_at = now;
      if (interrupted_at && now > *interrupted_at + kInterruptGrace) break;
      if (now > deadline) break;
      if (interrupted_at && PeerKnownDead(nic0_, server_address_)) break;
      if (!interrupted_at && now > renew_at && renewals_left_ > 0 && HoldsQueuedSend(nic0_) &&
          HasConnections(nic0_)) {
        DrainOrAbandon();  // calls back into this frame, which we leave now
        throw ConnectionStuck{};
      }
    }
    if (done && StopRequested()) {
      throw RuntimeError(std::string("interrupted after sending ") + what);
    }
    if (done && error_code == FI_ECANCELED && may_resend) return false;
    if (!done || !error.empty()) {
      // Read before the drain, whose cancel of a send still queued calls
      // the callback too.
      const bool finished = done;
      const bool never_taken = !done && HoldsQueuedSend(nic0_);
      // The send's callback points into this frame: nothing may call it
      // once we throw.
      DrainOrAbandon();
      if (!finished && StopRequested()) {
        throw RuntimeError(std::string("interrupted while sending ") + what);
      }
      char waited[128];
      // Over tcp the provider takes no send until it has a connection to
      // the server (-FI_EAGAIN meanwhile, on 1.x and 2.x).
      std::snprintf(waited, sizeof(waited),
                    never_taken ? "the provider did not take it within %g s: it has no "
                                  "connection to the server"
                                : "no answer within %g s",
                    options_.connect_timeout);
      std::string why = finished ? error : waited;
      throw RuntimeError(std::string("cannot reach the server with ") + what + ": " + why +
                         " (is it running, with the same --provider?)");
    }
    return true;
  }

  // Over tcp the provider takes no send until its connection to the server
  // is up, and one can wait for ever: libfabric 1.17's tcp leaves open a
  // socket it accepted but had not read the request of when its endpoint
  // closes (the server rebuilding its front door after a flood), and
  // nothing times the request out. Removing the server's address does not
  // close the connection (rxm does so only with FI_AV_REMOVE_CLEANUP), so
  // NIC 0 is opened anew: a new address, and new connections.
  struct ConnectionStuck {};
  static constexpr double kNotTakenSeconds = 5.0;
  // tcp (libfabric 2.x's own, or 1.x's over ofi_rxm) and verbs over
  // ofi_rxm; not shm, efa or simnic, which need no connection.
  static bool HasConnections(const Network& net) {
    const char* name = net.info().fabric_attr->prov_name;
    return std::strncmp(name, "tcp", 3) == 0 || std::strstr(name, "ofi_rxm") != nullptr;
  }
  void RenewNic0() {
    --renewals_left_;
    // Every operation of NIC 0 is forgotten (the send was cancelled
    // first), in a new domain with every registration made again: over tcp
    // on libfabric 2.x a closed endpoint leaves a peer's half-made
    // connection behind in its domain (docs/provider-failures.md). Each
    // CONNECT reads the regions' keys anew.
    send_region_ = MemoryRegion();
    reply_region_ = MemoryRegion();
    probe_region_ = MemoryRegion();
    node_.RegisterAgain(0, 0, [this] { Recovery::ResetDomain(nic0_, /*keep_address=*/false); });
    send_region_ = nic0_.Register(send_buffer_);
    reply_region_ = nic0_.Register(reply_buffer_);
    probe_region_ = nic0_.Register(probe_buffer_);
    probe_in_flight_ = false;  // forgotten with the endpoint
    server_ = nic0_.AddPeer(server_address_);
    session_.address = nic0_.address();  // replies go there now
    ListenForReply();
    last_reply_at_ = Clock::now();  // the server has not been asked yet
    std::printf(
        "The provider had no connection to the server after %g s: NIC 0 opened anew, asking "
        "again.\n",
        kNotTakenSeconds);
    std::fflush(stdout);
  }

  static bool HoldsQueuedSend(const Network& net) {
    for (const RdmaOp* op : net.pending_ops) {
      if (op->type == OpType::kSend) return true;
    }
    return false;
  }

  // Stopped while the server writes: tell it (CANCEL), best effort and for
  // a second at most, so it need not wait for its stall timeout; no
  // provider tells a server that a client left (efa, tcp's clean close).
  void SayWeAreLeaving() {
    std::vector<uint8_t> message = Encode(CancelMessage{remote_context_}, session_);
    send_buffer_.CopyFromHost(0, message.data(), message.size());
    bool done = false;
    try {
      nic0_.PostSend(server_, send_buffer_.data(), message.size(), send_region_.desc(),
                     [&done](Network&, RdmaOp&) { done = true; });
      auto deadline = Clock::now() + std::chrono::seconds(1);
      while (!done && Clock::now() < deadline) nic0_.PollCompletion();
    } catch (const std::exception&) {
      // Best effort: the server's own watch ends the transfer anyway.
    }
    if (!done) DrainOrAbandon();  // the callback points into this frame
  }

  // Gives queued sends up and waits a moment for those in flight; whatever
  // the provider still holds is detached.
  void DrainOrAbandon() {
    Recovery::CancelQueuedTransmits(nic0_);
    auto deadline = Clock::now() + std::chrono::seconds(1);
    while (nic0_.outstanding_transmits() > 0 && Clock::now() < deadline) {
      try {
        nic0_.PollCompletion();
      } catch (const std::exception&) {
        break;
      }
    }
    Recovery::DetachTransmits(nic0_);
  }

  int Verify(const RandomFillRequest& request, double seconds) {
    auto start = Clock::now();
    std::vector<uint8_t> host(node_.buffer_size());
    VerifyReport total;
    std::string first_bad;
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (uint32_t b = 0; b < node_.buffers_per_gpu(); ++b) {
        node_.buffer(g, b).CopyToHost(0, host.data(), host.size());
        VerifyReport report =
            VerifyPages(RandomStream(request.seed, static_cast<uint32_t>(g), b), host.data(),
                        host.size(), request.page_size, request.page_indices);
        total.pages_checked += report.pages_checked;
        total.bytes_checked += report.bytes_checked;
        total.bad_pages += report.bad_pages;
        if (report.bad_pages > 0 && first_bad.empty()) {
          first_bad = "GPU " + std::to_string(g) + " buffer " + std::to_string(b) + " page " +
                      std::to_string(report.first_bad_page) + " (slot " +
                      std::to_string(request.page_indices[report.first_bad_page]) + ")";
        }
      }
    }
    double verify_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    bool ok = total.bad_pages == 0;
    if (ok) {
      std::printf("Verified %llu page(s), %s: every byte correct (%.3f s).\n",
                  static_cast<unsigned long long>(total.pages_checked),
                  FormatBytes(total.bytes_checked).c_str(), verify_seconds);
    } else {
      std::fprintf(stderr, "%s/client: error: %llu of %llu page(s) wrong, first: %s\n",
                   chapter_.c_str(), static_cast<unsigned long long>(total.bad_pages),
                   static_cast<unsigned long long>(total.pages_checked), first_bad.c_str());
    }
    if (!options_.result_json.empty()) {
      nlohmann::json r = ResultRecord(chapter_, "client");
      r["provider"] = node_.fabric().provider;
      AddMemoryFields(r, MemoryKindName(node_.fabric().memory), DeviceRdmaOf(node_.net(0, 0)));
      r["gpus"] = node_.num_gpus();
      r["nics_per_gpu"] = node_.nics_per_gpu();
      r["page_size"] = request.page_size;
      r["pages"] = request.num_pages();
      r["seed"] = request.seed;
      r["seconds"] = seconds;
      r["verified"] = ok;
      r["bad_pages"] = total.bad_pages;
      AppendResult(options_.result_json, r);
    }
    return ok ? 0 : 1;
  }

  const ClientOptions& options_;
  const std::string& chapter_;
  Node& node_;
  Network& nic0_;
  Buffer send_buffer_;
  MemoryRegion send_region_;
  Buffer reply_buffer_;
  MemoryRegion reply_region_;
  Buffer probe_buffer_;
  MemoryRegion probe_region_;
  Session session_;                  // this attempt's (NewSession)
  std::atomic<uint64_t> cookie_{0};  // NIC 0's CHALLENGE of this attempt, once it came
  // A NIC's inbox for its own CHALLENGE (NICs other than 0 whose address
  // differs from every earlier NIC's).
  struct ChallengeInbox {
    size_t nic;  // gpu * nics_per_gpu + nic
    Buffer buffer;
    MemoryRegion region;
    std::atomic<uint64_t> cookie{0};  // this attempt's, once it came

    ChallengeInbox(size_t nic, Buffer buffer, MemoryRegion region)
        : nic(nic), buffer(std::move(buffer)), region(std::move(region)) {}
  };
  static constexpr size_t kChallengeInboxSize = 64 + kMaxAddressLength;
  const size_t num_nics_ = node_.num_gpus() * node_.nics_per_gpu();
  std::deque<ChallengeInbox> inboxes_;              // a deque: its entries never move
  std::atomic<Clock::time_point> last_reply_at_{};  // any reply of our sessions
  std::array<uint64_t, 8> recent_nonces_{};         // the last attempts' (NewSession)
  size_t recent_next_ = 0;
  static constexpr int kNic0Renewals = 2;  // RenewNic0, at most this often per run
  int renewals_left_ = kNic0Renewals;
  std::atomic<bool> heard_{false};  // any reply of our session since the last look
  std::atomic<bool> probe_in_flight_{false};
  Clock::time_point heard_at_{};  // the polling thread's
  Clock::time_point next_probe_{};
  size_t probes_unanswered_ = 0;
  bool server_silent_ = false;              // written by the first polling thread
  std::string rejected_;                    // the server's reason, once a REJECT arrived...
  std::atomic<bool> rejected_flag_{false};  // ...published by this flag
  std::string busy_reason_;                 // the last BUSY's reason...
  std::atomic<bool> busy_flag_{false};      // ...published by this flag
  std::atomic<size_t> notices_{0};
  std::vector<uint8_t> server_address_;
  fi_addr_t server_ = FI_ADDR_UNSPEC;
  uint32_t remote_context_ = 0;
  bool server_gone_ = false;              // written by the first polling thread, read after join
  Clock::time_point next_event_check_{};  // PollAll's reading of the event queues
};

}  // namespace

int ClientMain(int argc, char** argv, const std::string& chapter) {
  std::string program = chapter + "/client";
  return GuardedMain(program.c_str(), [&]() -> int {
    ClientOptions options;
    if (!ParseClientOptions(argc, argv, chapter, &options)) return 0;
    InstallStopHandlers();
    InstallCrashGuard(program.c_str());
    // Ctrl-C waits while the endpoints open (harness/recovery.h, bug B).
    std::optional<StopSignalsHeld> held(std::in_place);
    Node node(options, kBuffersPerGpu, options.buffer_size);
    held.reset();
    node.PrintSummary(std::cout);
    std::cout.flush();
    if (options.print_topology) return 0;
    // Bounds what no loop of ours can: a thread stuck inside the provider.
    std::vector<Network*> nets;
    for (size_t g = 0; g < node.num_gpus(); ++g) {
      for (size_t n = 0; n < node.nics_per_gpu(); ++n) nets.push_back(&node.net(g, n));
    }
    StuckPolicy policy;
    // A client stuck on a lock of a server that died (shm) removes the dead
    // server's files on its way out, as it does when it ends normally.
    policy.before_exit = [&node, &options] {
      try {
        RemoveFilesOfDeadPeers(node.net(0, 0), {FromHex(options.server)});
      } catch (const std::exception&) {
        // A malformed --server: nothing to remove.
      }
    };
    ProviderWatchdog watchdog(program, nets, kStuckSeconds, policy);
    RandomFillClient client(options, chapter, node);
    return client.Run();
  });
}

}  // namespace tutorial
