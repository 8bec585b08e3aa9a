#include "common/server.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "common/counter_rule.h"
#include "common/errors.h"
#include "common/main_guard.h"
#include "common/more.h"
#include "common/op_pool.h"
#include "common/options.h"
#include "common/random_fill.h"
#include "common/result_json.h"
#include "common/shutdown.h"
#include "harness/cpu_ticks.h"
#include "harness/exercise_hooks.h"
#include "harness/recovery.h"
#include "harness/recovery_nic.h"
#include "harness/thread_stats.h"

namespace tutorial {

WriteJob::WriteJob(Node& node, const ConnectMessage& connect, const RandomFillRequest& request,
                   uint64_t repeat, std::vector<fi_addr_t> peers, ProgressLine& progress,
                   const std::atomic<bool>* abandon, WriteJobHooks* hooks)
    : node_(node),
      groups_(node.net_groups()),
      repeat_(repeat),
      progress_(progress),
      abandon_(abandon),
      hooks_(hooks),
      num_gpus_(node.num_gpus()),
      nics_per_gpu_(node.nics_per_gpu()),
      buffers_per_gpu_(node.buffers_per_gpu()),
      page_size_(request.page_size),
      num_pages_(request.num_pages()),
      page_indices_(request.page_indices.data()) {
  for (size_t gpu = 0; gpu < num_gpus_; ++gpu) {
    for (size_t nic = 0; nic < nics_per_gpu_; ++nic) {
      for (size_t buf = 0; buf < buffers_per_gpu_; ++buf) {
        const RemoteRegion& remote = connect.region(gpu, nic, buf);
        RdmaWrite write;
        write.local = node.buffer(gpu, buf).data();
        write.length = page_size_;
        write.local_desc = node.region(gpu, nic, buf).desc();
        write.peer = peers[gpu * nics_per_gpu_ + nic];
        write.remote_addr = remote.addr;
        write.remote_key = remote.key;
        targets_.push_back(write);
      }
    }
  }
}

void WriteJob::WriterDone() {
  if (hooks_ != nullptr) hooks_->WriterDone();
}

bool WriteJob::Interrupted() const {
  return StopRequested() || (abandon_ != nullptr && abandon_->load(std::memory_order_relaxed));
}

void WriteJob::UseGpuOnThisThread(size_t gpu) {
  // The harness learns of each writer thread once: its first call here.
  thread_local const WriteJob* told = nullptr;
  if (told != this && hooks_ != nullptr) {
    told = this;
    hooks_->WriterThreadStarted(gpu);
  }
  MakeCudaDeviceCurrent(node_.groups()[gpu].cuda_device);
}

namespace {

// The NICs' counters summed (safe while writers run).
NetworkCounters SumCounters(Node& node) {
  NetworkCounters sum;
  for (size_t g = 0; g < node.num_gpus(); ++g) {
    for (size_t n = 0; n < node.nics_per_gpu(); ++n)
      sum += NicHarness::Of(node.net(g, n)).meter().counters();
  }
  return sum;
}

// Restarts the NICs' peak counters and returns SumCounters: the transfer's
// counters are SumCounters() after it minus this.
NetworkCounters StartCounting(Node& node) {
  for (size_t g = 0; g < node.num_gpus(); ++g) {
    for (size_t n = 0; n < node.nics_per_gpu(); ++n)
      NicHarness::Of(node.net(g, n)).meter().ResetPeaks();
  }
  return SumCounters(node);
}

// The server's side of a job: how each writer thread ran (for the result
// line; a writer that runs on the calling thread counts that thread), the
// NICs' counters over the writer's run, and the drain before the writer
// goes.
class JobAccounting final : public WriteJobHooks {
 public:
  explicit JobAccounting(Node& node)
      : node_(node),
        caller_(std::this_thread::get_id()),
        caller_start_(SampleThisThread()),
        before_(StartCounting(node)) {
    ResetStagedFailure();
  }

  void WriterThreadStarted(size_t gpu) override {
    if (std::this_thread::get_id() == caller_) return;
    NameThisThread("writer-g" + std::to_string(gpu));  // for ps -L, top -H
    // Reported when the thread ends.
    thread_local std::unique_ptr<ThreadSampler> sampler;
    sampler = std::make_unique<ThreadSampler>(*this);
  }

  void WriterDone() override {
    counters_ = SumCounters(node_) - before_;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (threads_ended_ == 0) Add(SampleThisThread() - caller_start_);
    }
    DrainTransmits(node_, kDrainSeconds);
  }

  const NetworkCounters& counters() const { return counters_; }
  ThreadUsage threads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return usage_;
  }

 private:
  struct ThreadSampler {
    explicit ThreadSampler(JobAccounting& job) : job(job), start(SampleThisThread()) {}
    ~ThreadSampler() {
      ThreadUsage used = SampleThisThread() - start;
      std::lock_guard<std::mutex> lock(job.mutex_);
      job.Add(used);
      ++job.threads_ended_;
      NoteWriterThreadEnded();
    }
    JobAccounting& job;
    ThreadUsage start;
  };

  void Add(const ThreadUsage& usage) {
    usage_.wall_ticks += usage.wall_ticks;
    usage_.cpu_ns += usage.cpu_ns;
    usage_.involuntary_switches += usage.involuntary_switches;
    usage_.migrations =
        usage_.migrations >= 0 && usage.migrations >= 0 ? usage_.migrations + usage.migrations : -1;
  }

  Node& node_;
  std::thread::id caller_;
  ThreadUsage caller_start_;
  NetworkCounters before_;
  NetworkCounters counters_;
  mutable std::mutex mutex_;
  ThreadUsage usage_{0, 0, 0, 0};  // all zero: migrations known until a thread says not
  size_t threads_ended_ = 0;
};

}  // namespace

namespace {

constexpr size_t kReceiveSlots = 4;
// A provider call that has not returned after this long never will.
constexpr double kStuckSeconds = 10.0;
// Messages that arrive while a transfer runs wait here; beyond this many,
// a flood is dropped instead of filling the server's memory.
constexpr size_t kMaxWaitingMessages = 64;
// A transfer during which no NIC completes anything for this long has lost
// its client (one that stopped, or a provider that keeps writes to a dead
// process in flight forever).
constexpr double kStallSeconds = 10.0;
constexpr double kNoticeSeconds = 10.0;
constexpr double kRejectSeconds = 2.0;
constexpr char kClientLeft[] = "the client was stopped and said so (CANCEL)";
// Why clients whose messages interleaved hear BUSY (OwedFills).
constexpr char kClientsAtOnce[] = "sorting out requests of clients that came at once";
// Empty polls of the front door before the wait for a client starts to
// sleep between polls.
constexpr size_t kBusyIdlePolls = 10000;

std::string ClientCommand(const std::string& chapter, const ServerOptions& o, const Node& node,
                          const std::string& address_hex) {
  std::string command =
      "bazel run //chapters/" + chapter + ":client -- --server " + address_hex + " --provider " +
      node.fabric().provider + " --memory " + MemoryKindName(node.fabric().memory) + " --gpus " +
      std::to_string(node.num_gpus()) + " --nics-per-gpu " + std::to_string(node.nics_per_gpu());
  if (!o.domain.empty()) command += " --domain " + o.domain;
  return command;
}

// Serves RANDOM_FILL requests, one client at a time.
//
// The protocol's messages (CONNECT, RANDOM_FILL, REJECT) go through the
// server's front door: one more endpoint on NIC 0's domain, whose address
// is the one the server prints. The series receives them on NIC 0 itself;
// a separate endpoint never writes to a client, so a client that dies
// cannot leave anything on it, and it outlives the rebuilds that give the
// data NICs a fresh start (harness/recovery.h): the next client finds the
// server at the same address, on EFA too, which cannot reopen an endpoint
// at its old address.
class RandomFillServer {
 public:
  RandomFillServer(const ServerOptions& options, const std::string& chapter, Node& node,
                   Network& front_door, const WriterFn& run_writer)
      : options_(options),
        chapter_(chapter),
        node_(node),
        run_writer_(run_writer),
        front_door_(front_door),
        receive_buffer_(Buffer::Allocate(MemoryKind::kHost, -1, kReceiveSlots * kMaxMessageSize)),
        receive_region_(front_door_.Register(receive_buffer_)),
        reply_buffer_(Buffer::Allocate(MemoryKind::kHost, -1, kMaxRejectReason + 64)),
        reply_region_(front_door_.Register(reply_buffer_)) {}

  // The server is the node's last user: its endpoints close before any
  // registration or buffer (ours here, the node's after us) goes away, so
  // nothing can arrive in freed memory.
  ~RandomFillServer() {
    Recovery::CloseEndpoint(front_door_);
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n) Recovery::CloseEndpoint(node_.net(g, n));
    }
  }

  int Run() {
    PostReceives();
    AnnounceAddress();
    std::printf("------\nWaiting for a client (Ctrl-C to stop).\n");
    std::fflush(stdout);

    size_t idle_polls = 0;
    auto next_event_check = Clock::now();
    while (!StopRequested()) {
      if (Clock::now() >= next_event_check) {
        next_event_check = Clock::now() + std::chrono::milliseconds(100);
        TakeEventErrorsBetweenTransfers();
      }
      // Between clients nothing is timed: after a while without a message
      // the wait sleeps a little between polls instead of keeping a core
      // busy (a reply then comes at most a fraction of a millisecond late).
      if (front_door_.PollCompletion() > 0 || MailboxWaiting()) {
        idle_polls = 0;
      } else if (++idle_polls > kBusyIdlePolls) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        sweeper_.Sweep();  // after a poll: every name sent to us was taken
      }
      while (!StopRequested()) {
        std::optional<std::vector<uint8_t>> message = TakeMessage();
        if (!message) break;
        std::optional<bool> served = HandleMessage(*message);
        if (StopRequested()) break;
        if (served.has_value() && options_.once) return *served ? 0 : 1;
      }
    }
    std::printf("Stopping: %zu transfer(s) served, %zu failed, %zu message(s) dropped.\n", served_,
                failed_, dropped_.load());
    DrainTransmits(node_, kDrainSeconds);
    return 0;
  }

 private:
  void AnnounceAddress() {
    std::string address = ToHex(front_door_.address());
    std::printf("Server address: %s\n", address.c_str());
    std::printf("Start a client with:\n  %s\n",
                ClientCommand(chapter_, options_, node_, address).c_str());
    if (!options_.address_file.empty()) WriteFileAtomically(options_.address_file, address + "\n");
  }

  bool MailboxWaiting() {
    std::lock_guard<std::mutex> lock(mailbox_mutex_);
    return !mailbox_.empty();
  }

  std::optional<std::vector<uint8_t>> TakeMessage() {
    std::lock_guard<std::mutex> lock(mailbox_mutex_);
    if (mailbox_.empty()) return std::nullopt;
    std::vector<uint8_t> message = std::move(mailbox_.front().bytes);
    taken_arrived_ = mailbox_.front().arrived;
    mailbox_.pop_front();
    return message;
  }

  // While a transfer runs or the server recovers from one, the front door
  // is still answered, from a thread of its own (harness/recovery.h, bug B):
  // a CONNECT hears BUSY and its client asks again later; the RANDOM_FILL
  // that follows it is dropped without a word. `what` is what keeps the
  // server busy, for the client's line.
  void AnswerWhileBusy(const std::vector<uint8_t>& message, const std::string& what) {
    try {
      MessageType type = PeekMessageType(message.data(), message.size());
      if (type == MessageType::kRandomFill) {
        DecodeRandomFill(message.data(), message.size());
        if (owed_fills_.Take(taken_arrived_)) return;  // its CONNECT heard BUSY
        throw ProtocolError("RANDOM_FILL before CONNECT");
      }
      if (type == MessageType::kCancel) {
        CancelMessage cancel = DecodeCancel(message.data(), message.size());
        std::lock_guard<std::mutex> lock(watch_mutex_);
        if (cancel.remote_context == serving_context_) {
          client_left_ = true;
          if (watch_ != nullptr) watch_->Abandon(kClientLeft);
        }
        return;
      }
      if (type != MessageType::kConnect) throw ProtocolError("unexpected message while busy");
      ConnectMessage connect = DecodeConnect(message.data(), message.size());
      owed_fills_.Add();  // the RANDOM_FILL that follows it goes unanswered
      std::string note = SendReply(connect.nic_addresses[0], Encode(BusyMessage{what}), false);
      std::printf("A client arrived while the server was %s: told it to wait (BUSY)%s.\n",
                  what.c_str(), note.c_str());
      std::fflush(stdout);
    } catch (const ProtocolError& e) {
      ++dropped_;
      std::fprintf(stderr, "server: dropped a message: %s\n", e.what());
    }
  }

  // Clients whose CONNECT may be paired with another's RANDOM_FILL (one
  // was pending, or another client's RANDOM_FILL is still owed) all hear
  // BUSY and ask again (harness/recovery.h, OwedFills). Returns a note.
  std::string TellBusyBeforePairing(const ConnectMessage& connect) {
    std::string notes = TellPendingConnectBusy();
    owed_fills_.Add();
    notes += SendReply(connect.nic_addresses[0], Encode(BusyMessage{kClientsAtOnce}), false);
    return notes;
  }

  // The pending CONNECT, if any, hears BUSY; its RANDOM_FILL is owed.
  std::string TellPendingConnectBusy() {
    if (!connect_) return "";
    owed_fills_.Add();
    std::string note =
        SendReply(connect_->nic_addresses[0], Encode(BusyMessage{kClientsAtOnce}), false);
    connect_.reset();
    return note;
  }

  void PostReceives() {
    for (size_t slot = 0; slot < kReceiveSlots; ++slot) PostReceive(slot);
  }

  void PostReceive(size_t slot) {
    char* buf = static_cast<char*>(receive_buffer_.data()) + slot * kMaxMessageSize;
    front_door_.PostRecv(buf, kMaxMessageSize, receive_region_.desc(),
                         [this, slot, buf](Network&, RdmaOp& op) {
                           std::unique_lock<std::mutex> lock(mailbox_mutex_);
                           if (op.ok() && mailbox_.size() < kMaxWaitingMessages) {
                             mailbox_.push_back(Received::Now(buf, op.received));
                           } else if (op.ok()) {
                             ++dropped_;
                             std::fprintf(stderr,
                                          "server: dropped a message (%zu bytes): %zu messages are "
                                          "already waiting\n",
                                          op.received, mailbox_.size());
                           } else if (op.error != FI_ECANCELED) {
                             // Longer than a receive buffer (FI_ETRUNC) or broken.
                             ++dropped_;
                             std::fprintf(stderr, "server: dropped a message (%zu bytes): %s\n",
                                          op.received, op.error_message.c_str());
                           }
                           if (!StopRequested()) PostReceive(slot);
                         });
  }

  // Returns the transfer's outcome when the message started one. Anything
  // the protocol does not expect is dropped with one line on stderr, and
  // the sender of a decodable CONNECT hears why in a REJECT.
  std::optional<bool> HandleMessage(const std::vector<uint8_t>& message) {
    std::optional<ConnectMessage> reply_to;
    bool is_connect = false;
    try {
      MessageType type = PeekMessageType(message.data(), message.size());
      if (type == MessageType::kConnect) {
        ConnectMessage connect = DecodeConnect(message.data(), message.size());
        reply_to = connect;
        is_connect = true;
        CheckConnectFitsServer(connect, Layout());
        CheckClientAddresses(connect);
        if (connect_ && taken_arrived_ - connect_since_ >
                            std::chrono::duration<double>(OwedFills::kOwedSeconds)) {
          ++dropped_;
          std::fprintf(stderr,
                       "server: dropped a message: a CONNECT that no RANDOM_FILL followed "
                       "(a newer CONNECT replaces it)\n");
          connect_.reset();
        }
        if (connect_ || owed_fills_.Any(taken_arrived_)) {
          std::string notes = TellBusyBeforePairing(connect);
          std::printf("Clients came at once: told them to wait (BUSY)%s.\n", notes.c_str());
          return std::nullopt;
        }
        connect_ = std::move(connect);
        connect_since_ = taken_arrived_;
        std::printf("Received CONNECT: %u GPU(s) x %u NIC(s), %u buffer(s) per GPU.\n",
                    connect_->num_gpus, connect_->nics_per_gpu, connect_->buffers_per_gpu);
        return std::nullopt;
      }
      if (type == MessageType::kCancel) return std::nullopt;  // a transfer already over
      if (type == MessageType::kReject || type == MessageType::kBusy) {
        throw ProtocolError("unexpected REJECT or BUSY message (only the server sends those)");
      }
      // A RANDOM_FILL, good or bad, ends the CONNECT before it.
      if (connect_) {
        reply_to = std::move(connect_);
        connect_.reset();
      }
      RandomFillRequest request = DecodeRandomFill(message.data(), message.size());
      if (!reply_to && owed_fills_.Take(taken_arrived_))
        return std::nullopt;  // its CONNECT heard BUSY
      if (!reply_to) throw ProtocolError("RANDOM_FILL before CONNECT");
      CheckRequestFits(request, *reply_to, Layout());
      TakeEventErrorsBetweenTransfers();  // none may abandon this transfer
      std::vector<fi_addr_t> peers = AddClientPeers(*reply_to);
      return Serve(*reply_to, request, peers);
    } catch (const ProtocolError& e) {
      ++dropped_;
      // A failed insert can leave an address vector refusing every later
      // one: make the NICs whole before anything else uses them.
      std::string notes = Recover(/*always=*/false);
      if (reply_to) notes += SendReject(*reply_to, e.what());
      // Its RANDOM_FILL may still come, and must not meet another's CONNECT.
      if (is_connect && (connect_ || owed_fills_.Any(taken_arrived_))) {
        notes += TellPendingConnectBusy();
        owed_fills_.Add();
      }
      notes += Recover(/*always=*/false);
      std::fprintf(stderr, "server: dropped a message: %s%s\n", e.what(), notes.c_str());
      return std::nullopt;
    }
  }

  bool IsOwnAddress(const std::vector<uint8_t>& address) {
    if (front_door_.address() == address) return true;
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n) {
        if (node_.net(g, n).address() == address) return true;
      }
    }
    return false;
  }

  // Every client address must be one the provider can insert, and none may
  // be ours: writes "to the client" would land in this server's memory.
  void CheckClientAddresses(const ConnectMessage& connect) {
    for (size_t i = 0; i < connect.nic_addresses.size(); ++i) {
      const std::vector<uint8_t>& address = connect.nic_addresses[i];
      try {
        Recovery::CheckPeerAddress(node_.net(i / node_.nics_per_gpu(), i % node_.nics_per_gpu()),
                                   address);
      } catch (const RuntimeError& e) {
        throw ProtocolError("CONNECT: NIC " + std::to_string(i) + ": " + e.what());
      }
      if (IsOwnAddress(address)) {
        throw ProtocolError("CONNECT: NIC " + std::to_string(i) +
                            " names one of this server's own endpoints");
      }
    }
  }

  // Server NIC i talks to client NIC i. An address the AV refuses drops
  // the request; those already inserted are removed again.
  std::vector<fi_addr_t> AddClientPeers(const ConnectMessage& connect) {
    std::vector<fi_addr_t> peers;
    for (size_t i = 0; i < connect.nic_addresses.size(); ++i) {
      Network& net = node_.net(i / node_.nics_per_gpu(), i % node_.nics_per_gpu());
      try {
        peers.push_back(net.AddPeer(connect.nic_addresses[i]));
      } catch (const RuntimeError& e) {
        RemovePeers(peers);
        throw ProtocolError("CONNECT: NIC " + std::to_string(i) + ": " + e.what());
      }
    }
    return peers;
  }

  void RemovePeers(const std::vector<fi_addr_t>& peers) {
    for (size_t i = 0; i < peers.size(); ++i) {
      node_.net(i / node_.nics_per_gpu(), i % node_.nics_per_gpu()).RemovePeer(peers[i]);
    }
  }

  // Removes the shm files of the clients served so far whose processes are
  // gone (a SIGKILL leaves them; harness/recovery.h), and remembers
  // `current` for later sweeps. Other providers keep no files.
  void SweepPastClients(const ConnectMessage& current) {
    constexpr size_t kRemembered = 64;
    std::deque<std::vector<std::vector<uint8_t>>> alive;
    for (auto& addresses : past_clients_) {
      RemoveFilesOfDeadPeers(front_door_, addresses);
      if (!PeerKnownDead(front_door_, addresses[0])) alive.push_back(std::move(addresses));
    }
    past_clients_.swap(alive);
    if (past_clients_.empty() || past_clients_.back() != current.nic_addresses) {
      past_clients_.push_back(current.nic_addresses);
    }
    if (past_clients_.size() > kRemembered) past_clients_.pop_front();
  }

  // Gives every data endpoint a fresh start (harness/recovery.h) after a
  // transfer was abandoned (`always`), or when a NIC needs it (an address
  // vector that refused an insert). The front door is rebuilt only when it
  // needs it itself (a REJECT's insert refused): then, where the provider
  // cannot keep the address, the new one is announced as at start-up.
  // Returns "" or a note for the caller's one-line report.
  std::string Recover(bool always) {
    std::string note;
    if (Recovery::NeedsReset(front_door_)) {
      const std::vector<uint8_t> before = front_door_.address();
      try {
        Recovery::ResetEndpoint(front_door_, KeepsAddressOnRebuild(node_.fabric().provider));
      } catch (const RuntimeError&) {
        Recovery::ResetEndpoint(front_door_, /*keep_address=*/false);
      }
      PostReceives();  // the old endpoint took the posted ones with it
      note = "; rebuilt the front door";
      if (front_door_.address() != before) {
        note += " (it has a new address)";
        AnnounceAddress();
      }
    }
    bool needed = always;
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n)
        needed |= Recovery::NeedsReset(node_.net(g, n));
    }
    if (needed) note += RebuildNetworks(node_);
    return note;
  }

  // Reads the event queues of the front door and of every data NIC between
  // transfers (issue 23). An error left queued there would abandon the next,
  // healthy transfer at the watch's first look; and a front door whose
  // provider failed could stop hearing clients. Each error is one line; the
  // endpoint that reported it starts afresh (Recover), before a client uses
  // it.
  void TakeEventErrorsBetweenTransfers() {
    bool any = false;
    auto take = [&any](Network& net, const char* what) {
      for (int i = 0; i < 16; ++i) {  // a burst, bounded
        std::string error = Recovery::TakeEventError(net);
        if (error.empty()) return;
        std::fprintf(stderr, "server: %s reported an error between transfers: %s\n", what,
                     error.c_str());
        Recovery::WantReset(net);
        any = true;
      }
    };
    take(front_door_, "the front door");
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n) take(node_.net(g, n), "a data NIC");
    }
    if (!any) return;
    std::string note = Recover(/*always=*/false);
    std::fprintf(stderr, "server: recovered from it%s\n", note.c_str());
  }

  // Best effort: a client that sent a well-formed but unservable request
  // learns why at once instead of waiting for its timeout. Returns "" or a
  // note on why no REJECT went out.
  std::string SendReject(const ConnectMessage& client, const std::string& reason,
                         bool while_stopping = false) {
    const std::vector<uint8_t>& address = client.nic_addresses[0];
    if (IsOwnAddress(address)) return "; no REJECT sent: the sender named this server";
    return SendReply(address, Encode(RejectMessage{reason}), while_stopping);
  }

  // Sends `message` (a REJECT or a BUSY) to a client's NIC 0 through the
  // front door and waits up to 2 s for it to go out.
  std::string SendReply(const std::vector<uint8_t>& address, const std::vector<uint8_t>& message,
                        bool while_stopping) {
    if (address == front_door_.address()) return "; no reply sent: the sender named this server";
    fi_addr_t peer;
    try {
      peer = front_door_.AddPeer(address);
    } catch (const RuntimeError& e) {
      return std::string("; no reply sent: ") + e.what();
    }
    reply_buffer_.CopyFromHost(0, message.data(), message.size());
    bool done = false;
    front_door_.PostSend(peer, reply_buffer_.data(), message.size(), reply_region_.desc(),
                         [&done](Network&, RdmaOp&) { done = true; });
    auto deadline = Clock::now() + std::chrono::duration<double>(kRejectSeconds);
    while (!done && Clock::now() < deadline && (while_stopping || !StopRequested())) {
      front_door_.PollCompletion();
    }
    std::string note;
    if (!done) {
      // `done` lives on this stack: nothing may call back once we return.
      Recovery::CancelQueuedTransmits(front_door_);
      front_door_.PollCompletion();
      if (!done) Recovery::DetachTransmits(front_door_);
      note = "; the reply was not taken within 2 s";
    }
    front_door_.RemovePeer(peer);
    return note;
  }

  ServerLayout Layout() const {
    return ServerLayout{static_cast<uint32_t>(node_.num_gpus()),
                        static_cast<uint32_t>(node_.nics_per_gpu()), node_.buffers_per_gpu(),
                        node_.buffer_size()};
  }

  void FillBuffers(const RandomFillRequest& request) {
    auto start = Clock::now();
    size_t bytes = request.num_pages() * request.page_size;
    std::vector<uint8_t> staging(bytes);
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t b = 0; b < node_.buffers_per_gpu(); ++b) {
        RandomStream(request.seed, static_cast<uint32_t>(g), static_cast<uint32_t>(b))
            .Fill(0, staging.data(), bytes);
        node_.buffer(g, b).CopyFromHost(0, staging.data(), bytes);
      }
    }
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("Filled %zu buffer(s) with %s of random data each in %.3f s.\n",
                node_.num_gpus() * node_.buffers_per_gpu(), FormatBytes(bytes).c_str(), seconds);
  }

  // Tells the client that a NIC is done: one more WRITE of a page it already
  // sent, now carrying the remote context as CQ data. It goes out only after
  // every other write has completed, so the client may trust all its pages
  // once every NIC has reported; RDM endpoints do not order writes.
  bool SendDoneNotices(const WriteJob& job, const RandomFillRequest& request,
                       const TransferWatch& watch, std::string* error) {
    struct Notices {
      size_t done = 0;
      std::string error;
    } notices;
    for (size_t g = 0; g < job.num_gpus(); ++g) {
      for (size_t n = 0; n < job.nics_per_gpu(); ++n) {
        RdmaWrite write = job.MakeWrite(g, n, 0, 0);
        write.has_cq_data = true;
        write.cq_data = request.remote_context;
        node_.net(g, n).PostWrite(write, [&notices](Network& net, RdmaOp& op) {
          if (!op.ok() && notices.error.empty())
            notices.error = net.name() + ": " + op.error_message;
          ++notices.done;
        });
      }
    }
    auto deadline = Clock::now() + std::chrono::duration<double>(kNoticeSeconds);
    while (notices.done < job.num_nics()) {
      for (size_t g = 0; g < job.num_gpus(); ++g) {
        for (size_t n = 0; n < job.nics_per_gpu(); ++n) node_.net(g, n).PollCompletion();
      }
      if (watch.abandoned()) {
        notices.error = watch.reason();
      } else if (StopRequested()) {
        notices.error = "interrupted";
      } else if (Clock::now() > deadline) {
        notices.error = "the client did not take the final notices within 10 s";
      }
      if (!notices.error.empty()) break;
    }
    // The callbacks above point into this frame.
    if (notices.done < job.num_nics()) DrainTransmits(node_, kDrainSeconds);
    *error = notices.error;
    return error->empty();
  }

  bool Serve(const ConnectMessage& connect, const RandomFillRequest& request,
             const std::vector<fi_addr_t>& peers) {
    std::printf("Received RANDOM_FILL: %llu page(s) of %llu bytes, seed %llu, repeat %llu.\n",
                static_cast<unsigned long long>(request.num_pages()),
                static_cast<unsigned long long>(request.page_size),
                static_cast<unsigned long long>(request.seed),
                static_cast<unsigned long long>(options_.repeat));
    // A client killed after its transfer ended (while it verified) leaves
    // its shm files; they go at the next client's start, or at the end.
    SweepPastClients(connect);
    // Until the transfer is over (or, when it failed, the server has
    // recovered) a CONNECT hears BUSY; after that, messages wait for the
    // main loop, which is back within milliseconds.
    busy_what_ = "serving another client";
    busy_ = true;
    {
      // A CANCEL may come before the transfer starts (while the buffers fill).
      std::lock_guard<std::mutex> lock(watch_mutex_);
      serving_context_ = request.remote_context;
      client_left_ = false;
    }
    std::optional<BusyAnswerer> busy(std::in_place, [this] {
      size_t handled = front_door_.PollCompletion();
      while (busy_) {
        std::optional<std::vector<uint8_t>> message = TakeMessage();
        if (!message) break;
        AnswerWhileBusy(*message, busy_what_.load());
        ++handled;
      }
      if (handled == 0) sweeper_.Sweep();
      return handled;
    });
    FillBuffers(request);

    WriteOutcome outcome;
    NetworkCounters counters;
    ThreadUsage threads;
    {
      TransferWatch watch(node_, kStallSeconds, connect.nic_addresses[0]);
      {
        std::lock_guard<std::mutex> lock(watch_mutex_);
        watch_ = &watch;
        if (client_left_) watch.Abandon(kClientLeft);
      }
      uint64_t total =
          node_.num_gpus() * node_.buffers_per_gpu() * request.num_pages() * options_.repeat;
      ProgressLine progress(total, request.page_size, node_.link_gbps());
      JobAccounting accounting(node_);
      WriteJob job(node_, connect, request, options_.repeat, peers, progress, watch.flag(),
                   &accounting);
      try {
        outcome = run_writer_(job);
        counters = accounting.counters();
        threads = accounting.threads();
      } catch (const std::exception& e) {
        // The writer is gone without a drain: its callbacks must never run.
        for (size_t g = 0; g < node_.num_gpus(); ++g) {
          for (size_t n = 0; n < node_.nics_per_gpu(); ++n)
            Recovery::DetachTransmits(node_.net(g, n));
        }
        outcome.ok = false;
        outcome.error = e.what();
      }
      std::string error;
      if (outcome.ok && !SendDoneNotices(job, request, watch, &error)) {
        outcome.ok = false;
        outcome.error = error;
      }
      watch.Stop();
      {
        std::lock_guard<std::mutex> lock(watch_mutex_);
        watch_ = nullptr;
      }
      if (outcome.ok) busy_ = false;
      busy_what_ = "recovering after a client it lost";
      // A writer told to stop says "interrupted"; say why instead.
      if (!outcome.ok && (outcome.error.empty() || outcome.error == "interrupted")) {
        if (watch.abandoned()) {
          outcome.error = watch.reason();
        } else if (StopRequested()) {
          outcome.error = "interrupted (Ctrl-C or SIGTERM)";
        }
      }
    }
    if (!outcome.ok) DrainTransmits(node_, kDrainSeconds);
    RemovePeers(peers);
    // Every transfer ends with fresh data endpoints, not only a failed one
    // (harness/recovery.h, bug A): no removed peer's slot is ever reused.
    std::string repaired = RebuildNetworks(node_);
    if (outcome.ok) repaired.clear();
    busy_ = false;
    busy.reset();  // the front door is ours again
    repaired += Recover(/*always=*/false);
    // A client that is still there hears why at once (it listens for a
    // REJECT throughout), instead of waiting for its --timeout; also when
    // this server is stopping. A client known to be dead is not asked.
    if (!outcome.ok && !client_left_ && !PeerKnownDead(front_door_, connect.nic_addresses[0])) {
      repaired += SendReject(connect, kTransferAbandonedReason + outcome.error,
                             /*while_stopping=*/true);
    }
    SweepPastClients(connect);

    if (outcome.ok) {
      ++served_;
      bool emulated = MemoryLabel(MemoryKindName(node_.fabric().memory),
                                  DeviceRdmaOf(node_.net(0, 0))) == "cuda-emulated";
      std::printf(
          "Transfer done: %s in %.3f s, %.3f Gbps, %s Mops/s%s%s.\n",
          FormatBytes(outcome.stats.bytes).c_str(), outcome.stats.seconds, outcome.stats.gbps,
          FormatRate(outcome.stats.mops).c_str(),
          node_.simulated_model().empty() ? "" : " (simulated NICs)",
          emulated ? " (GPU memory, but WRITEs emulated: not a GPUDirect RDMA number)" : "");
    } else {
      ++failed_;
      std::printf("Transfer abandoned: %s%s\n", outcome.error.c_str(), repaired.c_str());
    }
    RecordResult(request, outcome, counters, threads);
    std::printf("------\nWaiting for a client (Ctrl-C to stop).\n");
    std::fflush(stdout);
    return outcome.ok;
  }

  void RecordResult(const RandomFillRequest& request, const WriteOutcome& outcome,
                    const NetworkCounters& c, const ThreadUsage& t) {
    if (options_.result_json.empty()) return;
    nlohmann::json r = ResultRecord(chapter_, "server");
    r["provider"] = node_.fabric().provider;
    AddMemoryFields(r, MemoryKindName(node_.fabric().memory), DeviceRdmaOf(node_.net(0, 0)));
    r["gpus"] = node_.num_gpus();
    r["nics_per_gpu"] = node_.nics_per_gpu();
    r["buffers_per_gpu"] = node_.buffers_per_gpu();
    r["page_size"] = request.page_size;
    r["pages"] = request.num_pages();
    r["repeat"] = options_.repeat;
    r["ok"] = outcome.ok;
    if (!outcome.ok) r["error"] = outcome.error;
    r["ops"] = outcome.stats.ops;
    r["bytes"] = outcome.stats.bytes;
    r["seconds"] = outcome.stats.seconds;
    r["gbps"] = outcome.stats.gbps;
    r["mops"] = outcome.stats.mops;
    r["link_gbps"] = node_.link_gbps();
    std::string model = node_.simulated_model();
    r["simulated"] = !model.empty();
    if (!model.empty()) r["model"] = model;
    // What the chapter's idea moves (docs/counters.md).
    r["counter_rule"] = kCounterRule;  // what the counts below mean (counter_rule.h)
    r["writes"] = c.writes;
    r["post_calls"] = c.post_calls;
    r["doorbells"] = c.doorbells;
    r["eagain"] = c.eagain;
    r["cq_reads"] = c.cq_reads;
    r["cq_empty_reads"] = c.cq_empty_reads;
    r["cq_entries"] = c.cq_entries;
    r["op_allocations"] = c.op_allocations;
    r["longest_write_run"] = c.longest_write_run;
    if (t.migrations >= 0) {
      r["migrations"] = t.migrations;
    } else {
      r["migrations"] = nullptr;
    }
    r["involuntary_switches"] = t.involuntary_switches;
    // CPU time inside provider calls: the threads' CPU time, split in the
    // proportion of their wall time spent inside those calls (a thread
    // preempted inside a call is not using the CPU; timing every call with
    // a CPU clock would cost a system call each).
    double inside = t.wall_ticks > 0 ? std::min(1.0, static_cast<double>(c.provider_ticks) /
                                                         static_cast<double>(t.wall_ticks))
                                     : 0.0;
    double cpu_ns = static_cast<double>(t.cpu_ns);
    double writes = c.writes > 0 ? static_cast<double>(c.writes) : 1.0;
    r["writer_cpu_seconds"] = cpu_ns / 1e9;
    r["writer_wall_seconds"] = static_cast<double>(t.wall_ticks) / TicksPerNanosecond() / 1e9;
    r["ns_per_write_provider"] = cpu_ns * inside / writes;
    r["ns_per_write_app"] = cpu_ns * (1 - inside) / writes;
    // The level the provider granted (it may give more than the chapter asked).
    fi_threading granted = node_.net(0, 0).info().domain_attr->threading;
    r["threading"] = granted == FI_THREAD_SAFE     ? "FI_THREAD_SAFE"
                     : granted == FI_THREAD_DOMAIN ? "FI_THREAD_DOMAIN"
                                                   : "other";
    r["op_pool"] = dynamic_cast<const PooledNetwork*>(&node_.net(0, 0)) != nullptr;
    r["doorbell_batching"] = dynamic_cast<const MoreNetwork*>(&node_.net(0, 0)) != nullptr;
    AppendResult(options_.result_json, r);
  }

  const ServerOptions& options_;
  const std::string& chapter_;
  Node& node_;
  const WriterFn& run_writer_;
  Network& front_door_;
  Buffer receive_buffer_;
  MemoryRegion receive_region_;
  Buffer reply_buffer_;
  MemoryRegion reply_region_;
  std::atomic<bool> busy_{false};           // CONNECTs hear BUSY...
  std::atomic<const char*> busy_what_{""};  // ...and why
  OwedFills owed_fills_;                    // RANDOM_FILLs of clients told BUSY, still to come
  std::mutex watch_mutex_;                  // the front door's thread ends a transfer a client left
  TransferWatch* watch_ = nullptr;
  uint32_t serving_context_ = 0;
  bool client_left_ = false;
  std::mutex mailbox_mutex_;  // the mailbox is filled by whoever polls the front door
  struct Received {
    std::vector<uint8_t> bytes;
    Clock::time_point arrived;
    static Received Now(const char* data, size_t length) {
      return {std::vector<uint8_t>(data, data + length), Clock::now()};
    }
  };
  std::deque<Received> mailbox_;
  // When the message last taken arrived (OwedFills); only the thread that
  // reads the front door's messages (the main loop, or the BusyAnswerer
  // while it runs) uses it.
  Clock::time_point taken_arrived_{};
  std::optional<ConnectMessage> connect_;
  Clock::time_point connect_since_{};
  size_t served_ = 0;
  size_t failed_ = 0;
  std::atomic<size_t> dropped_{0};
  StaleFileSweeper sweeper_{front_door_};
  std::deque<std::vector<std::vector<uint8_t>>> past_clients_;  // their NICs' addresses
};

}  // namespace

int ServerMain(int argc, char** argv, const std::string& chapter, const WriterFn& run_writer,
               const NetworkSetup& setup) {
  std::string program = chapter + "/server";
  return GuardedMain(program.c_str(), [&]() -> int {
    ServerOptions options;
    if (!ParseServerOptions(argc, argv, chapter, &options)) return 0;
    InstallStopHandlers();
    InstallCrashGuard(program.c_str());
    // Ctrl-C waits while the endpoints open (harness/recovery.h, bug B).
    std::optional<StopSignalsHeld> held(std::in_place);
    Node node(options, kBuffersPerGpu, options.buffer_size, setup);
    held.reset();
    node.PrintSummary(std::cout);
    std::cout.flush();
    if (options.print_topology) return 0;
    TicksPerNanosecond();  // calibrated once, before anything is timed
    // The front door: the address clients know (see RandomFillServer).
    Network front_door(node.net(0, 0).info());
    NicHarness front_door_harness(front_door);
    // Bounds what no loop of ours can: a thread stuck inside the provider.
    // The server then ends with exit code 3, and a supervisor starts a new
    // one (common/shutdown.h says why it does not restart itself).
    std::vector<Network*> nets = {&front_door};
    for (size_t g = 0; g < node.num_gpus(); ++g) {
      for (size_t n = 0; n < node.nics_per_gpu(); ++n) nets.push_back(&node.net(g, n));
    }
    ProviderWatchdog watchdog(program, nets, kStuckSeconds);
    RandomFillServer server(options, chapter, node, front_door, run_writer);
    return server.Run();
  });
}

}  // namespace tutorial
