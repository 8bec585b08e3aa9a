#include "common/server.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "common/counter_rule.h"
#include "common/errors.h"
#include "common/front_door.h"
#include "common/more.h"
#include "common/op_pool.h"
#include "common/options.h"
#include "common/random_fill.h"
#include "common/result_json.h"
#include "harness/cpu_ticks.h"
#include "harness/exercise_hooks.h"
#include "harness/main_guard.h"
#include "harness/recovery.h"
#include "harness/recovery_nic.h"
#include "harness/shutdown.h"
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

// Receives the front door keeps posted where it posts them (not over tcp on
// libfabric 1.x: FrontDoorNetwork): a message that finds none waits inside
// the provider (ofi_rxm keeps about 13 KB for each), so the front door
// reads its completion queue and posts again as fast as they come.
constexpr size_t kReceiveSlots = 16;
// A provider call that has not returned after this long never will.
constexpr double kStuckSeconds = 10.0;
// Messages wait in the mailbox (FairMailbox) until they are handled;
// beyond this many, or this many of one source, a message is turned away
// (answered BUSY) instead of filling the server's memory.
constexpr size_t kMaxWaitingMessages = 64;
constexpr size_t kMaxWaitingPerSource = 16;
// CONNECTs waiting for the RANDOM_FILL of their session (PendingConnects),
// one per address, each for kPendingSeconds at most.
constexpr size_t kMaxPendingConnects = 16;
constexpr double kPendingSeconds = 15.0;
// Replies in flight at once, beyond one CHALLENGE for each of a client's
// NICs; each waits at most kRejectSeconds.
constexpr size_t kReplySlots = 16;
// Of those, how many may wait for the provider to reach the address a
// message came from (as it declares it). A sender's own address is reached
// at once where its message came over a connection (tcp) or needs none (efa);
// a forged one, where nobody listens, never is, and would hold its slot for
// kRejectSeconds.
constexpr size_t kRepliesWaitingForSenders = 4;
// A waiting reply is offered again after this, then after twice as long
// each time (a client's other NIC is reached within a millisecond or two).
constexpr auto kFirstReofferDelay = std::chrono::milliseconds(1);
// BUSYs to messages turned away from a full mailbox, to addresses not
// replied to lately, per second.
constexpr size_t kNewPeerBusysPerSecond = 100;
// Addresses replied to lately stay in the front door's address vector (a
// reply to the same client, or a flood's source, inserts nothing new); the
// least recently used one leaves when another is needed. As many again as
// a client has NICs, so that every CHALLENGE of one CONNECT finds a place.
constexpr size_t kReplyPeers = 16;
constexpr size_t kReplySlotSize = kMaxRejectReason + 64 + kMaxAddressLength;
// A transfer during which no NIC completes anything for this long has lost
// its client (one that stopped, or a provider that keeps writes to a dead
// process in flight forever).
constexpr double kStallSeconds = 10.0;
constexpr double kNoticeSeconds = 10.0;
constexpr double kRejectSeconds = 2.0;
constexpr char kClientLeft[] = "the client was stopped and said so (CANCEL)";
constexpr char kTurnedAway[] = "too many messages waiting at its front door";
constexpr char kNotKept[] =
    "no CONNECT of this session waiting (not kept, or lost): send both again";
constexpr char kWrongCookie[] =
    "RANDOM_FILL: its cookie is not the XOR of those sent to its addresses (a sender that does "
    "not receive at all of them, or a late or forged request)";
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
                   FrontDoorNetwork& front_door, const WriterFn& run_writer)
      : options_(options),
        chapter_(chapter),
        node_(node),
        run_writer_(run_writer),
        front_door_(front_door),
        receive_buffer_(
            Untouched(Buffer::Allocate(MemoryKind::kHost, -1, kReceiveSlots * kMaxMessageSize))),
        receive_region_(front_door_.Register(receive_buffer_)),
        reply_slots_(kReplySlots + node.num_gpus() * node.nics_per_gpu()),
        reply_peers_limit_(kReplyPeers + node.num_gpus() * node.nics_per_gpu()),
        reply_buffer_(Buffer::Allocate(MemoryKind::kHost, -1, reply_slots_ * kReplySlotSize)),
        reply_region_(front_door_.Register(reply_buffer_)) {
    NoteDataAddresses();
    front_door_.OnMessage([this](const uint8_t* data, size_t length) { TakeIn(data, length); },
                          [this](const std::string& why) {
                            last_message_at_ = Clock::now();
                            Dropped(why);
                          });
  }

  // The server is the node's last user: its endpoints close before any
  // registration or buffer (ours here, the node's after us) goes away, so
  // nothing can arrive in freed memory.
  ~RandomFillServer() {
    Recovery::CloseEndpoint(front_door_);
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n) Recovery::CloseEndpoint(node_.net(g, n));
    }
  }

  // The receive slots are large (a RANDOM_FILL may be 1 MiB) but messages
  // are small: their pages are given back before registration (so a
  // provider that pins, efa, pins them afresh), and only those a message
  // touches count in the server's memory.
  static Buffer Untouched(Buffer buffer) {
    long page = sysconf(_SC_PAGESIZE);
    auto start = reinterpret_cast<uintptr_t>(buffer.data());
    uintptr_t first = (start + page - 1) / page * page;
    uintptr_t last = (start + buffer.size()) / page * page;
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    return buffer;
  }

  int Run() {
    PostReceives();
    if (front_door_.receive_mode() == FrontDoorNetwork::ReceiveMode::kBuffered) {
      std::printf(
          "Front door: messages arrive in the provider's buffers (FI_BUFFERED_RECV), each "
          "given back once copied.\n");
    }
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
      if (front_door_.PollCompletion() > 0 || !mailbox_.empty()) {
        idle_polls = 0;
      } else if (++idle_polls > kBusyIdlePolls) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        sweeper_.Sweep();  // after a poll: every name sent to us was taken
        RebuildAfterFlood();
      }
      CollectReplies();
      drop_log_.Flush();
      turn_log_.Flush();
      busy_log_.Flush();
      while (!StopRequested()) {
        std::optional<FairMailbox::Message> message = TakeMessage();
        if (!message) break;
        std::optional<bool> served = HandleMessage(message->bytes);
        if (StopRequested()) break;
        if (served.has_value() && options_.once) return *served ? 0 : 1;
        // Between messages the provider's queue is read again, so that a
        // flood never waits there (its memory) while the mailbox is handled.
        front_door_.PollCompletion();
      }
    }
    drop_log_.Flush(Clock::now(), /*force=*/true);
    turn_log_.Flush(Clock::now(), /*force=*/true);
    busy_log_.Flush(Clock::now(), /*force=*/true);
    std::printf(
        "Stopping: %zu transfer(s) served, %zu failed, %zu message(s) dropped, %zu turned "
        "away.\n",
        served_, failed_, dropped_.load(), turned_away_.load());
    DrainTransmits(node_, kDrainSeconds);
    return 0;
  }

 private:
  // After a flood (more messages kept out of the mailbox than it holds) and
  // FloodOverSeconds without any message, the front door is rebuilt at its
  // address (clients need not learn a new one): what the provider took in
  // during the flood goes back with the old endpoint. Between clients, with
  // the mailbox empty and no reply in flight. A message that arrives in
  // the moment of the rebuild is lost with the old endpoint.
  void RebuildAfterFlood() {
    const double flood_over = FloodOverSeconds(front_door_.info().fabric_attr->prov_name);
    if (flood_over <= 0 || !KeepsAddressOnRebuild(node_.fabric().provider)) return;
    size_t kept_out = kept_out_.load();
    if (kept_out < kept_out_at_rebuild_ + kMaxWaitingMessages || !mailbox_.empty()) return;
    auto quiet = Clock::now() - last_message_at_.load();
    if (quiet < std::chrono::duration<double>(flood_over)) return;
    for (const ReplySlot& reply : replies_) {
      if (reply.state != ReplySlot::kFree) return;
    }
    kept_out_at_rebuild_ = kept_out;
    Recovery::WantReset(front_door_);
    std::string note = Recover(/*always=*/false);
    std::fprintf(stderr, "server: a flood at the front door is over%s\n", note.c_str());
  }

  void AnnounceAddress() {
    std::string address = ToHex(front_door_.address());
    std::printf("Server address: %s\n", address.c_str());
    std::printf("Start a client with:\n  %s\n",
                ClientCommand(chapter_, options_, node_, address).c_str());
    if (!options_.address_file.empty()) WriteFileAtomically(options_.address_file, address + "\n");
  }

  std::optional<FairMailbox::Message> TakeMessage() {
    std::optional<FairMailbox::Message> message = mailbox_.Take();
    if (message) taken_arrived_ = message->arrived;
    return message;
  }

  // One line on stderr, at most a few a second (a flood would otherwise
  // write gigabytes); the rest are counted.
  void Dropped(const std::string& why) {
    ++dropped_;
    drop_log_.Line("server: dropped a message: " + why);
  }

  // While a transfer runs or the server recovers from one, the front door
  // is still answered, from a thread of its own (harness/recovery.h, bug B):
  // a CONNECT hears BUSY (and no CHALLENGE, so no RANDOM_FILL follows it)
  // and its client asks again later; a PROBE hears ALIVE. `what` is what
  // keeps the server busy.
  void AnswerWhileBusy(const std::vector<uint8_t>& message, const std::string& what) {
    try {
      MessageHeader header = DecodeHeader(message.data(), message.size());
      CheckClientSession(header);
      const Session& session = header.session;
      if (header.type == MessageType::kProbe) {
        AnswerProbe(header, message.size());
        return;
      }
      if (header.type == MessageType::kRandomFill) {
        RandomFillRequest request = DecodeRandomFill(message.data(), message.size());
        ConnectMessage connect;
        switch (pending_.Take(session, request.cookie, &connect)) {
          case PendingConnects::Pairing::kPaired:
            // Its CONNECT came before this transfer began: it hears BUSY now.
            SendBusy(session, what);
            return;
          case PendingConnects::Pairing::kWrongCookie:
            Dropped(kWrongCookie);  // its sender proved nothing: no reply
            return;
          case PendingConnects::Pairing::kNoConnect:
            AnswerUnpairedFill(session, what);
            return;
        }
        return;
      }
      if (header.type == MessageType::kCancel) {
        DecodeCancel(message.data(), message.size());
        std::lock_guard<std::mutex> lock(watch_mutex_);
        if (session == serving_session_) {
          client_left_ = true;
          if (watch_ != nullptr) watch_->Abandon(kClientLeft);
        }
        return;
      }
      DecodeConnect(message.data(), message.size());
      // A client asks again 0.125 s after a BUSY at the soonest, so this
      // limit silences only a flood (or a forger of its address).
      if (!busy_limiter_.Allow(session.address, Clock::now())) return;
      std::string note = SendBusy(session, what);
      busy_log_.Line("server: a client arrived while the server was " + what +
                     ": told it to wait (BUSY)" + note);
    } catch (const ProtocolError& e) {
      Dropped(e.what());
    }
  }

  // A RANDOM_FILL that no kept CONNECT of its session awaits. The server
  // keeps a bounded number of them, so a flood can push out a good
  // client's, and a rebuilt front door loses what the provider held: the
  // sender hears BUSY and sends both messages again, rather than a REJECT
  // that would end a client the server merely forgot. A peer that sends
  // only RANDOM_FILLs hears BUSY until its own timeout.
  void AnswerUnpairedFill(const Session& session, const std::string& why) {
    std::string note = "; no reply sent: one went to its address within 100 ms";
    if (busy_limiter_.Allow(session.address, Clock::now())) {
      note = SendBusy(session, why);
      if (note.empty()) note = "; told it BUSY";
    }
    Dropped("RANDOM_FILL before CONNECT (no CONNECT of its session)" + note);
  }

  // ALIVE, at most once per address and 500 ms (a client PROBEs every 2 s):
  // PROBEs that name someone else's address do not make the server a
  // reflector.
  void AnswerProbe(const MessageHeader& header, size_t length) {
    if (header.body_offset != length) throw ProtocolError("PROBE: unexpected body");
    if (!probe_limiter_.Allow(header.session.address, Clock::now())) return;
    SendReply(header.session, EncodeEmpty(MessageType::kAlive, Session{header.session.nonce, {}}));
  }

  // Between transfers nobody is served, so a client that still PROBEs has
  // lost part of its request: a CONNECT or RANDOM_FILL that a flood pushed
  // out, or that a rebuilt front door lost (its PROBE comes seconds after
  // both, on the same path). BUSY makes it send both again; ALIVE would
  // keep it waiting for its whole --timeout.
  void AnswerProbeBetweenTransfers(const MessageHeader& header, size_t length) {
    if (header.body_offset != length) throw ProtocolError("PROBE: unexpected body");
    pending_.Forget(header.session);  // half a request: the client sends both again
    if (!busy_limiter_.Allow(header.session.address, Clock::now())) return;
    std::string note = SendBusy(header.session, "it holds no whole request of this session");
    busy_log_.Line(
        "server: a PROBE of a session with no whole request: told it to send "
        "again (BUSY)" +
        note);
  }

  // A CONNECT that passed every check: kept (PendingConnects), and every
  // address it declares (its session's, which is its NIC 0's, and each of
  // its NICs') is sent a cookie of its own (CHALLENGE); its RANDOM_FILL must
  // carry the XOR of them all. Nothing is written to the CONNECT's NIC
  // addresses before that RANDOM_FILL came: a peer that declares another
  // process's endpoint as one of its NICs never learns that endpoint's
  // cookie. One CHALLENGE per address and 100 ms, and one per declared
  // address for a CONNECT: a flood of CONNECTs naming someone else's
  // addresses is not answered in kind.
  void Challenge(const Session& session, ConnectMessage connect) {
    std::vector<std::vector<uint8_t>> addresses = DeclaredAddresses(session, connect);
    if (!challenge_limiter_.AllowAll(addresses, Clock::now())) {
      Dropped("a CONNECT within 100 ms of the last CHALLENGE to one of its addresses");
      return;
    }
    PendingConnects::Kept kept = pending_.Keep(session, std::move(connect), taken_arrived_);
    for (size_t i = 0; i < kept.expired; ++i) {
      Dropped("a CONNECT that no RANDOM_FILL followed within 15 s");
    }
    if (kept.cookie == 0) {
      SendBusy(session, "too many clients connecting at once");
      busy_log_.Line("server: too many clients connecting at once: told one to wait (BUSY)");
      return;
    }
    // The sender's own address first: only once the provider reached it at
    // once may the CHALLENGEs to its other NICs wait for theirs.
    bool sender_reached = false;
    for (size_t i = 0; i < kept.challenges.size(); ++i) {
      const PendingConnects::Challenge& challenge = kept.challenges[i];
      Reach reach = i > 0 && sender_reached ? Reach::kSendersNic : Reach::kSender;
      bool taken_now = false;
      std::string note =
          SendReply(Session{session.nonce, challenge.address},
                    Encode(ChallengeMessage{challenge.cookie}, Session{session.nonce, {}}), reach,
                    session, &taken_now);
      if (i == 0) sender_reached = taken_now;
      if (!note.empty()) {
        pending_.Forget(session);  // its client never learns every cookie
        Dropped("a CONNECT whose CHALLENGE could not go out" + note);
        return;
      }
    }
  }

  // Buffered receives (FrontDoorNetwork) need none posted.
  void PostReceives() {
    if (front_door_.receive_mode() == FrontDoorNetwork::ReceiveMode::kBuffered) return;
    for (size_t slot = 0; slot < kReceiveSlots; ++slot) PostReceive(slot);
  }

  void PostReceive(size_t slot) {
    char* buf = static_cast<char*>(receive_buffer_.data()) + slot * kMaxMessageSize;
    front_door_.PostRecv(
        buf, kMaxMessageSize, receive_region_.desc(), [this, slot, buf](Network&, RdmaOp& op) {
          last_message_at_ = Clock::now();
          if (op.ok()) {
            TakeIn(reinterpret_cast<const uint8_t*>(buf), op.received);
          } else if (op.error != FI_ECANCELED) {
            // Longer than a receive buffer (FI_ETRUNC) or broken.
            Dropped(op.error_message + " (" + std::to_string(op.received) + " bytes)");
          }
          if (!StopRequested()) PostReceive(slot);
        });
  }

  // A message that arrived at the front door, copied into the mailbox. One
  // that finds no room there is answered BUSY (at most once per address and
  // ReplyLimiter interval) and counted, never queued.
  void TakeIn(const uint8_t* data, size_t length) {
    last_message_at_ = Clock::now();
    std::vector<uint8_t> source;
    std::optional<bool> awaited = SortAtTheDoor(data, length, &source);
    if (!awaited) return;
    FairMailbox::Message message{std::vector<uint8_t>(data, data + length), Clock::now(),
                                 std::move(source)};
    FairMailbox::Refused refused = mailbox_.Push(std::move(message), *awaited);
    if (refused != FairMailbox::Refused::kNo) TurnAway(data, length, refused);
  }

  // Whether a message may wait in the mailbox, before it takes a place
  // there: a sender can name a new address in every message, so the
  // per-source limit alone lets one sender fill the mailbox. Nothing for a
  // message that names no session, or an address nobody could answer at
  // (malformed, or an shm process that is gone), or that is a RANDOM_FILL
  // that neither a kept CONNECT awaits nor a waiting message of its sender
  // comes before (answered BUSY now, as the main loop would); true for a
  // RANDOM_FILL that a kept CONNECT awaits (the mailbox's reserved places);
  // false for the rest. `*source` is set to the session's address.
  std::optional<bool> SortAtTheDoor(const uint8_t* data, size_t length,
                                    std::vector<uint8_t>* source) {
    try {
      MessageHeader header = DecodeHeader(data, length);
      CheckClientSession(header);
      const auto now = Clock::now();
      if (!door_checked_.Passed(header.session.address, now)) {
        try {
          // Over shm this also finds a process that is gone.
          Recovery::CheckPeerAddress(front_door_, header.session.address);
        } catch (const std::runtime_error& e) {
          throw ProtocolError(std::string("its session's address: ") + e.what());
        }
        door_checked_.NotePass(header.session.address, now);
      }
      *source = header.session.address;
      if (header.type != MessageType::kRandomFill) return false;
      if (pending_.Awaits(header.session)) return true;
      if (mailbox_.Holds(header.session.address)) return false;
      DecodeRandomFill(data, length);
      AnswerUnpairedFill(header.session, kNotKept);
    } catch (const ProtocolError& e) {
      Dropped(e.what());
    }
    ++kept_out_;
    return std::nullopt;
  }

  void TurnAway(const uint8_t* data, size_t length, FairMailbox::Refused refused) {
    ++turned_away_;
    ++kept_out_;
    std::string note;
    try {
      MessageHeader header = DecodeHeader(data, length);
      CheckClientSession(header);
      if (header.type == MessageType::kConnect || header.type == MessageType::kRandomFill) {
        // A BUSY to an address not replied to lately costs the provider
        // a new peer (over tcp a connection attempt, which forged
        // addresses would make at the flood's rate): a bounded number a second.
        if (!KnownReplyPeer(header.session.address) && !new_peer_busy_budget_.Take(Clock::now())) {
          note = "; no reply sent: " + std::to_string(kNewPeerBusysPerSecond) +
                 " to new addresses this second";
        } else if (busy_limiter_.Allow(header.session.address, Clock::now())) {
          note = SendBusy(header.session, kTurnedAway);
          if (note.empty()) note = "; told it BUSY";
        }
      }
    } catch (const ProtocolError&) {
      // Names no session: nobody to answer.
    }
    turn_log_.Line(std::string("server: turned away a message (") + std::to_string(length) +
                   " bytes): " +
                   (refused == FairMailbox::Refused::kSourceFull
                        ? "its sender already has " + std::to_string(kMaxWaitingPerSource)
                        : std::to_string(kMaxWaitingMessages)) +
                   " messages waiting" + note);
  }

  // Returns the transfer's outcome when the message started one. Anything
  // the protocol does not expect is dropped with one line on stderr, and
  // the sender of a decodable CONNECT hears why in a REJECT.
  std::optional<bool> HandleMessage(const std::vector<uint8_t>& message) {
    std::optional<Session> reply_to;
    try {
      MessageHeader header = DecodeHeader(message.data(), message.size());
      CheckClientSession(header);
      const Session& session = header.session;
      if (header.type == MessageType::kProbe) {
        AnswerProbeBetweenTransfers(header, message.size());
        return std::nullopt;
      }
      if (header.type == MessageType::kCancel) return std::nullopt;  // a transfer already over
      reply_to = session;
      if (header.type == MessageType::kConnect) {
        ConnectMessage connect = DecodeConnect(message.data(), message.size());
        CheckConnectFitsServer(connect, Layout());
        if (connect.nic_addresses[0] != session.address) {
          throw ProtocolError("CONNECT: its session names another address than its NIC 0");
        }
        CheckClientAddresses(connect);
        Challenge(session, std::move(connect));
        return std::nullopt;
      }
      // A RANDOM_FILL, good or bad, ends the CONNECT of its session; it is
      // paired with it only when it carries the CHALLENGEs' cookies.
      RandomFillRequest request;
      try {
        request = DecodeRandomFill(message.data(), message.size());
      } catch (const ProtocolError&) {
        pending_.Forget(session);
        throw;
      }
      std::optional<ConnectMessage> connect(std::in_place);
      switch (pending_.Take(session, request.cookie, &*connect)) {
        case PendingConnects::Pairing::kPaired:
          break;
        case PendingConnects::Pairing::kNoConnect:
          AnswerUnpairedFill(session, kNotKept);
          return std::nullopt;
        case PendingConnects::Pairing::kWrongCookie:
          reply_to.reset();  // its sender proved nothing: no reply
          throw ProtocolError(kWrongCookie);
      }
      CheckRequestFits(request, *connect, Layout());
      TakeEventErrorsBetweenTransfers();  // none may abandon this transfer
      std::vector<fi_addr_t> peers = AddClientPeers(*connect);
      std::printf("Received CONNECT: %u GPU(s) x %u NIC(s), %u buffer(s) per GPU.\n",
                  connect->num_gpus, connect->nics_per_gpu, connect->buffers_per_gpu);
      return Serve(*connect, session, request, peers);
    } catch (const ProtocolError& e) {
      // A failed insert can leave an address vector refusing every later
      // one: make the NICs whole before anything else uses them.
      std::string notes = Recover(/*always=*/false);
      // One REJECT per address and interval: a flood of bad messages is
      // not answered in kind.
      if (reply_to && reject_limiter_.Allow(reply_to->address, Clock::now())) {
        notes +=
            SendReply(*reply_to, Encode(RejectMessage{e.what()}, Session{reply_to->nonce, {}}));
      }
      Dropped(e.what() + notes);
      return std::nullopt;
    }
  }

  bool IsOwnAddress(const std::vector<uint8_t>& address) {
    if (front_door_.address() == address) return true;
    // The data NICs' addresses as last noted: the front door's thread asks
    // while the main thread rebuilds those endpoints.
    std::lock_guard<std::mutex> lock(data_addresses_mutex_);
    for (const auto& own : data_addresses_) {
      if (own == address) return true;
    }
    return false;
  }

  // Called once the data endpoints are (re)built.
  void NoteDataAddresses() {
    std::vector<std::vector<uint8_t>> addresses;
    for (size_t g = 0; g < node_.num_gpus(); ++g) {
      for (size_t n = 0; n < node_.nics_per_gpu(); ++n)
        addresses.push_back(node_.net(g, n).address());
    }
    std::lock_guard<std::mutex> lock(data_addresses_mutex_);
    data_addresses_.swap(addresses);
  }

  // Every client address must be one the provider can insert, and none may
  // be ours: writes "to the client" would land in this server's memory.
  void CheckClientAddresses(const ConnectMessage& connect) {
    for (size_t i = 0; i < connect.nic_addresses.size(); ++i) {
      const std::vector<uint8_t>& address = connect.nic_addresses[i];
      try {
        Recovery::CheckPeerAddress(node_.net(i / node_.nics_per_gpu(), i % node_.nics_per_gpu()),
                                   address);
      } catch (const std::runtime_error& e) {
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
      } catch (const std::runtime_error& e) {
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
      // In a new domain, on every provider: over tcp on libfabric 2.x a
      // closed endpoint can leave a peer's half-made connection behind in
      // its domain (docs/provider-failures.md), and the front door's two
      // small regions make a new domain cheap.
      receive_region_ = MemoryRegion();
      reply_region_ = MemoryRegion();
      try {
        Recovery::ResetDomain(front_door_, KeepsAddressOnRebuild(node_.fabric().provider));
      } catch (const std::runtime_error&) {
        Recovery::ResetDomain(front_door_, /*keep_address=*/false);
      }
      receive_region_ = front_door_.Register(receive_buffer_);
      reply_region_ = front_door_.Register(reply_buffer_);
      PostReceives();  // the old endpoint took the posted ones with it
      // ...and its address vector, with every reply in flight.
      reply_peers_.clear();
      for (ReplySlot& reply : replies_) reply.state = ReplySlot::kFree;
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
    if (needed) {
      note += RebuildNetworks(node_);
      NoteDataAddresses();
    }
    return note;
  }

  // Reads the event queues of the front door and of every data NIC between
  // transfers. An error left queued there would abandon the next,
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

  // BUSY, with `why`, to the session's address (SendReply's rules).
  std::string SendBusy(const Session& to, const std::string& why) {
    return SendReply(to, Encode(BusyMessage{why}, Session{to.nonce, {}}));
  }

  // Where a reply goes, which says how it may wait for the provider to
  // reach that address (SendReply).
  enum class Reach {
    kSender,      // the address a message declares it came from
    kSendersNic,  // another NIC of a CONNECT whose sender was reached at once
  };

  // Sends `message` (a REJECT, BUSY, ALIVE or CHALLENGE) to `to.address`
  // through the front door, best effort and without waiting: at most
  // reply_slots_ replies are in flight, each for kRejectSeconds at most
  // (CollectReplies). A reply the provider cannot take at once waits for it
  // to reach the address only within limits: to a sender, in at most
  // kRepliesWaitingForSenders slots, so that senders that forge their
  // address cannot hold them all; to another NIC of a CONNECT (`of`, its
  // session), only while no reply of another session of that sender waits.
  // Never to one of this server's own endpoints. Sets `*taken_now` when the
  // provider took it at once. Returns "" or a note on why no reply went out.
  std::string SendReply(const Session& to, const std::vector<uint8_t>& message,
                        Reach reach = Reach::kSender, const Session& of = {},
                        bool* taken_now = nullptr) {
    if (IsOwnAddress(to.address)) return "; no reply sent: the sender named this server";
    // shm: a process that died may have held its own queue's lock, on which
    // a send would spin forever (a CHALLENGE follows every CONNECT, so a
    // client killed right after its CONNECT meets one).
    if (PeerKnownDead(front_door_, to.address)) return "; no reply sent: its process is gone";
    if (message.size() > kReplySlotSize) return "; no reply sent: too long";
    CollectReplies();
    // BUSYs, which a flood earns, leave a quarter of the slots to the
    // others (ALIVE, REJECT), so that a waiting client's PROBE is answered.
    size_t usable = PeekMessageType(message.data(), message.size()) == MessageType::kBusy
                        ? reply_slots_ - reply_slots_ / 4
                        : reply_slots_;
    size_t slot = 0, in_use = 0;
    for (const ReplySlot& reply : replies_) in_use += reply.state != ReplySlot::kFree;
    while (slot < reply_slots_ && replies_[slot].state != ReplySlot::kFree) ++slot;
    if (slot == reply_slots_ || in_use >= usable) {
      ++replies_skipped_;
      return "; no reply sent: " + std::to_string(reply_slots_) + " replies already in flight";
    }
    fi_addr_t peer;
    try {
      std::optional<fi_addr_t> known = ReplyPeer(to.address);
      if (!known) return "; no reply sent: every known peer has a reply in flight";
      peer = *known;
    } catch (const std::runtime_error& e) {
      return std::string("; no reply sent: ") + e.what();
    }
    ReplySlot& reply = replies_[slot];
    reply = ReplySlot{};
    reply.state = ReplySlot::kInFlight;
    reply.peer = peer;
    reply.sent = Clock::now();
    reply.length = message.size();
    reply.reach = reach;
    reply.of = of;
    std::memcpy(ReplyBuffer(slot), message.data(), message.size());
    if (PostReply(slot)) {
      if (taken_now != nullptr) *taken_now = true;
      return "";
    }
    std::string refused = WhyReplyMayNotWait(WaitingReplies(), reach == Reach::kSender, of,
                                             kRepliesWaitingForSenders);
    if (!refused.empty()) {
      reply.state = ReplySlot::kFree;
      ++replies_skipped_;
      return refused;
    }
    reply.state = ReplySlot::kWaiting;  // offered again by CollectReplies
    reply.backoff = kFirstReofferDelay;
    reply.next_offer = reply.sent + reply.backoff;
    return "";
  }

  char* ReplyBuffer(size_t slot) {
    return static_cast<char*>(reply_buffer_.data()) + slot * kReplySlotSize;
  }

  // Offers a slot's reply to the provider: true when it took it. Never
  // through the front door's queue of posts, so that a reply waiting for
  // one address never holds up another's.
  bool PostReply(size_t slot) {
    const ReplySlot& reply = replies_[slot];
    return front_door_.TrySendNow(
        reply.peer, ReplyBuffer(slot), reply.length, reply_region_.desc(),
        [this, slot](Network&, RdmaOp&) { replies_[slot].state = ReplySlot::kDone; });
  }

  // The replies now waiting for the provider to reach their addresses.
  std::vector<WaitingReply> WaitingReplies() const {
    std::vector<WaitingReply> waiting;
    for (const ReplySlot& reply : replies_) {
      if (reply.state == ReplySlot::kWaiting) {
        waiting.push_back(WaitingReply{reply.reach == Reach::kSender, reply.of});
      }
    }
    return waiting;
  }

  // Whether `address` was replied to lately (it is in the address vector).
  bool KnownReplyPeer(const std::vector<uint8_t>& address) const {
    for (const auto& known : reply_peers_) {
      if (known.first == address) return true;
    }
    return false;
  }

  // The front door's fi_addr_t for `address`: one of the reply_peers_limit_
  // addresses replied to lately, or inserted now in place of the least
  // recently used one that has no reply in flight (nullopt when all have).
  // Throws RuntimeError when the provider refuses the address.
  std::optional<fi_addr_t> ReplyPeer(const std::vector<uint8_t>& address) {
    for (auto it = reply_peers_.begin(); it != reply_peers_.end(); ++it) {
      if (it->first == address) {
        auto known = *it;
        reply_peers_.erase(it);
        reply_peers_.push_back(known);
        return known.second;
      }
    }
    if (reply_peers_.size() >= reply_peers_limit_) {
      auto in_flight = [this](fi_addr_t peer) {
        for (const ReplySlot& reply : replies_) {
          if (reply.state != ReplySlot::kFree && reply.peer == peer) return true;
        }
        return false;
      };
      auto oldest = reply_peers_.begin();
      while (oldest != reply_peers_.end() && in_flight(oldest->second)) ++oldest;
      if (oldest == reply_peers_.end()) return std::nullopt;
      front_door_.RemovePeer(oldest->second);
      reply_peers_.erase(oldest);
    }
    fi_addr_t peer = front_door_.AddPeer(address);
    reply_peers_.emplace_back(address, peer);
    return peer;
  }

  // Offers the waiting replies to the provider again; one that waited
  // kRejectSeconds is given up (nothing of it was posted).
  void OfferWaitingReplies(Clock::time_point now) {
    for (size_t slot = 0; slot < replies_.size(); ++slot) {
      ReplySlot& reply = replies_[slot];
      if (reply.state != ReplySlot::kWaiting) continue;
      if (now - reply.sent > std::chrono::duration<double>(kRejectSeconds)) {
        reply.state = ReplySlot::kFree;
        ++replies_given_up_;
      } else if (now < reply.next_offer) {
        continue;
      } else if (PostReply(slot)) {
        reply.state = ReplySlot::kInFlight;
        reply.sent = now;
      } else {
        // Each offer to an address nobody reached may cost a connection
        // attempt: ever less often.
        reply.backoff *= 2;
        reply.next_offer = now + reply.backoff;
      }
    }
  }

  // Offers the waiting replies again, frees the slots of replies that went
  // out, and gives up those the provider has not completed within
  // kRejectSeconds (a peer that stopped reading).
  void CollectReplies() {
    auto now = Clock::now();
    OfferWaitingReplies(now);
    bool stuck = false;
    for (ReplySlot& reply : replies_) {
      if (reply.state == ReplySlot::kInFlight &&
          now - reply.sent > std::chrono::duration<double>(kRejectSeconds)) {
        stuck = true;
      }
    }
    if (stuck) {
      // Nothing may call back into a slot once it is free again.
      Recovery::CancelQueuedTransmits(front_door_);
      front_door_.PollCompletion();
      bool detach = false;
      for (ReplySlot& reply : replies_) {
        if (reply.state == ReplySlot::kInFlight &&
            now - reply.sent > std::chrono::duration<double>(kRejectSeconds)) {
          detach = true;
        }
      }
      if (detach) {
        Recovery::DetachTransmits(front_door_);
        for (ReplySlot& reply : replies_) {
          if (reply.state == ReplySlot::kInFlight) reply.state = ReplySlot::kDone;
        }
        ++replies_given_up_;
      }
    }
    for (ReplySlot& reply : replies_) {
      if (reply.state == ReplySlot::kDone) reply.state = ReplySlot::kFree;
    }
  }

  // Waits (up to kRejectSeconds) until every reply in flight went out.
  std::string WaitForReplies(bool while_stopping) {
    auto deadline = Clock::now() + std::chrono::duration<double>(kRejectSeconds);
    auto in_flight = [this] {
      for (const ReplySlot& reply : replies_) {
        if (reply.state == ReplySlot::kInFlight || reply.state == ReplySlot::kWaiting) return true;
      }
      return false;
    };
    while (in_flight() && Clock::now() < deadline && (while_stopping || !StopRequested())) {
      front_door_.PollCompletion();
      OfferWaitingReplies(Clock::now());
    }
    std::string note = in_flight() ? "; the reply was not taken within 2 s" : "";
    if (!note.empty()) {
      for (ReplySlot& reply : replies_) {
        if (reply.state != ReplySlot::kFree) reply.sent = Clock::time_point{};
      }
    }
    CollectReplies();
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

  bool Serve(const ConnectMessage& connect, const Session& session,
             const RandomFillRequest& request, const std::vector<fi_addr_t>& peers) {
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
      serving_session_ = session;
      client_left_ = false;
    }
    std::optional<BusyAnswerer> busy(std::in_place, [this] {
      size_t handled = front_door_.PollCompletion();
      while (busy_) {
        std::optional<FairMailbox::Message> message = TakeMessage();
        if (!message) break;
        AnswerWhileBusy(message->bytes, busy_what_.load());
        ++handled;
        front_door_.PollCompletion();  // a flood must not wait in the provider
      }
      CollectReplies();
      drop_log_.Flush();
      turn_log_.Flush();
      busy_log_.Flush();
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
    NoteDataAddresses();
    if (outcome.ok) repaired.clear();
    busy_ = false;
    busy.reset();  // the front door is ours again
    repaired += Recover(/*always=*/false);
    // A client that is still there hears why at once (it listens for a
    // REJECT throughout), instead of waiting for its --timeout; also when
    // this server is stopping. A client known to be dead is not asked.
    if (!outcome.ok && !client_left_ && !PeerKnownDead(front_door_, connect.nic_addresses[0])) {
      repaired += SendReply(session, Encode(RejectMessage{kTransferAbandonedReason + outcome.error},
                                            Session{session.nonce, {}}));
      repaired += WaitForReplies(/*while_stopping=*/true);
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
  FrontDoorNetwork& front_door_;
  Buffer receive_buffer_;
  MemoryRegion receive_region_;
  const size_t reply_slots_;        // kReplySlots and one per NIC
  const size_t reply_peers_limit_;  // kReplyPeers and one per NIC
  Buffer reply_buffer_;
  MemoryRegion reply_region_;
  std::atomic<bool> busy_{false};           // CONNECTs hear BUSY...
  std::atomic<const char*> busy_what_{""};  // ...and why
  std::mutex data_addresses_mutex_;
  std::vector<std::vector<uint8_t>> data_addresses_;  // NoteDataAddresses
  std::mutex watch_mutex_;  // the front door's thread ends a transfer a client left
  TransferWatch* watch_ = nullptr;
  Session serving_session_;
  bool client_left_ = false;
  // Filled by whoever polls the front door (the main loop, or the
  // BusyAnswerer while a transfer runs).
  FairMailbox mailbox_{kMaxWaitingMessages, kMaxWaitingPerSource, kMaxPendingConnects};
  PendingConnects pending_{kMaxPendingConnects, std::chrono::duration<double>(kPendingSeconds)};
  struct ReplySlot {
    // kWaiting: the provider could not take it yet, offered again.
    enum State { kFree, kWaiting, kInFlight, kDone } state = kFree;
    fi_addr_t peer = FI_ADDR_UNSPEC;
    Clock::time_point sent{};
    size_t length = 0;
    Clock::duration backoff{};  // kWaiting: until the next offer, doubled each time
    Clock::time_point next_offer{};
    Reach reach = Reach::kSender;
    Session of;  // the CONNECT's session, for a CHALLENGE
  };
  std::vector<ReplySlot> replies_ =
      std::vector<ReplySlot>(reply_slots_);  // only the front door's poller uses them
  std::deque<std::pair<std::vector<uint8_t>, fi_addr_t>> reply_peers_;  // oldest use first
  size_t replies_skipped_ = 0;
  size_t replies_given_up_ = 0;
  ReplyLimiter busy_limiter_{std::chrono::milliseconds(100)};
  WindowBudget new_peer_busy_budget_{kNewPeerBusysPerSecond, std::chrono::seconds(1)};
  ReplyLimiter probe_limiter_{std::chrono::milliseconds(500)};
  ReplyLimiter reject_limiter_{std::chrono::milliseconds(100)};
  ReplyLimiter challenge_limiter_{std::chrono::milliseconds(100)};
  RateLimitedLog drop_log_{20, std::chrono::seconds(10), "server: also dropped"};
  RateLimitedLog turn_log_{5, std::chrono::seconds(10), "server: also turned away"};
  RateLimitedLog busy_log_{5, std::chrono::seconds(10), "server: also told"};
  // When the message last taken arrived (PendingConnects); only the thread that
  // reads the front door's messages (the main loop, or the BusyAnswerer
  // while it runs) uses it.
  Clock::time_point taken_arrived_{};
  size_t served_ = 0;
  size_t failed_ = 0;
  std::atomic<size_t> dropped_{0};
  std::atomic<size_t> turned_away_{0};
  // Session addresses SortAtTheDoor let in lately (over shm each check
  // looks at /dev/shm and the process): checked again after 1 s.
  RecentlyChecked door_checked_{std::chrono::milliseconds(1000), kMaxWaitingMessages};
  // Messages that took no place in the mailbox: sorted out at the door or
  // turned away (RebuildAfterFlood).
  std::atomic<size_t> kept_out_{0};
  size_t kept_out_at_rebuild_ = 0;
  std::atomic<Clock::time_point> last_message_at_{};  // any completion of a receive
  StaleFileSweeper sweeper_{front_door_};
  std::deque<std::vector<std::vector<uint8_t>>> past_clients_;  // their NICs' addresses
};

}  // namespace

// ofi_rxm (what "tcp" is on libfabric 1.x) keeps receive buffers of about
// 16 KB posted on its connections (4096 by default) and reads up to 32
// messages per progress call into them. The front door takes its messages
// in those buffers and gives each back (FrontDoorNetwork), so with 8 of
// them rxm never hands over more at once than the front door reads (16 per
// fi_cq_read), and a flood waits in the kernel's socket buffers (TCP flow
// control). Where receives are posted (2.x), a message that no receive of
// ours matches yet stays in its buffer, which is replaced by a new one. Set
// before the provider first reads it (the first fi_getinfo); a value the
// user set wins. Other providers ignore it.
void LimitProviderReceiveBuffers() { setenv("FI_OFI_RXM_MSG_RX_SIZE", "8", /*overwrite=*/0); }

int ServerMain(int argc, char** argv, const std::string& chapter, const WriterFn& run_writer,
               const NetworkSetup& setup) {
  std::string program = chapter + "/server";
  return GuardedMain(program.c_str(), [&]() -> int {
    ServerOptions options;
    if (!ParseServerOptions(argc, argv, chapter, &options)) return 0;
    LimitProviderReceiveBuffers();
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
    FrontDoorNetwork front_door(node.net(0, 0).info());
    NicHarness front_door_harness(front_door);
    // Bounds what no loop of ours can: a thread stuck inside the provider.
    // The server then ends with exit code 3, and a supervisor starts a new
    // one (harness/shutdown.h says why it does not restart itself).
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
