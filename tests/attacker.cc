// A hostile peer of the RANDOM_FILL server, for the attack suite
// (tests/attack_test.py) and for trying a server by hand. It speaks the
// real protocol through common's Network, one endpoint of the provider:
//
//   attacker --provider shm|tcp --server HEX --mode MODE [--seconds S]
//            [--gpus G --nics-per-gpu N --buffers-per-gpu B] [--interval S]
//
// Modes:
//   fills      RANDOM_FILLs of 1000 pages as fast as the provider takes
//              them, each of a new session that sent no CONNECT
//   connects   CONNECTs of the server's layout as fast as the provider
//              takes them, each of a new session, never a RANDOM_FILL
//   owed       one CONNECT every --interval seconds, never a RANDOM_FILL
//   malformed  CONNECTs naming addresses the provider must refuse, and
//              sessions naming random addresses (nobody, or a stranger)
//   spoofed    (tcp) CONNECTs as fast as the provider takes them, each
//              naming a new well-formed address that nobody listens at
//              (this host, a random port) as its session and every NIC:
//              what a sender that forges its source looks like, since
//              the provider does not name a stranger
//   stop       one good CONNECT and RANDOM_FILL naming this endpoint (its
//              CHALLENGE read and its cookie echoed, so that the server
//              starts writing), then no progress at all: a client that
//              stops reading. Says "attacker: stopped reading after its
//              RANDOM_FILL", or "attacker: no CHALLENGE came" (exit 1)
//   forgotten  one good CONNECT naming this endpoint (its CHALLENGE is
//              read and ignored), its RANDOM_FILL lost,
//              then a PROBE every 2 s as a waiting client sends: ends with
//              "attacker: heard BUSY after S s" (exit 0) when the server
//              answers BUSY, the sign to send both again, or exit 1
//   forged     CONNECTs that declare a bystander's address (an endpoint
//              of a child process, whose memory holds a pattern): its
//              session, every NIC address and every region are the
//              bystander's; each is followed by a RANDOM_FILL with a
//              guessed cookie, as fast as the provider takes them. Ends
//              with "attacker: the bystander (process P) is untouched
//              (...)" (exit 0) when none of the bystander's bytes changed,
//              or exit 1. The bystander counts the CHALLENGEs that reach
//              it and never hands them to the attacker.
//   nic-forged like forged, but the session and NIC 0 are this endpoint's
//              own, and only NIC 1 on (addresses and regions) are the
//              bystander's: the attacker reads its CHALLENGE and echoes its
//              cookie correctly, one session every 150 ms. Only proof that
//              it receives at every NIC's address keeps the server from
//              writing into the bystander. Ends as forged does.
//   guessed-keys no message to the server: RDMA WRITEs straight into the
//              bystander's region, whose address and size it knows (the
//              worst case) but not its key, with every key below 4096 and
//              random ones, as fast as the provider takes them. Keys are
//              all that stands between a peer and another's registered
//              memory where the application picks them (shm, tcp). Ends as
//              forged does.
//   cookie-rtt not an attack: one CONNECT (a new session each) every
//              110 ms, timing each until its CHALLENGE arrives, the round
//              trip a client now waits before its RANDOM_FILL. Prints
//              "attacker: N CHALLENGE(s): first F us, median M us, 90% P us"
//              With --own-nics K (K > 1) it opens K endpoints of its own and
//              declares them as the NICs (NIC i is endpoint i mod K), as a
//              client of K NICs does, and times each CONNECT until all K
//              CHALLENGEs came ("... N round(s) of K CHALLENGEs: ...").
// Other modes never read what the server answers. At the end it prints one
// line: "attacker: sent N message(s) in S s".
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "common/errors.h"
#include "common/messages.h"
#include "common/network.h"
#include "harness/recovery_nic.h"

namespace tutorial {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string provider = "tcp";
  std::string server;
  std::string mode;
  double seconds = 10;
  double interval = 5;
  uint32_t own_nics = 1;
  uint32_t gpus = 1, nics_per_gpu = 2, buffers_per_gpu = 2;
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--provider") {
      o.provider = value;
    } else if (flag == "--server") {
      o.server = value;
    } else if (flag == "--mode") {
      o.mode = value;
    } else if (flag == "--seconds") {
      o.seconds = std::stod(value);
    } else if (flag == "--interval") {
      o.interval = std::stod(value);
    } else if (flag == "--own-nics") {
      o.own_nics = static_cast<uint32_t>(std::stoul(value));
    } else if (flag == "--gpus") {
      o.gpus = static_cast<uint32_t>(std::stoul(value));
    } else if (flag == "--nics-per-gpu") {
      o.nics_per_gpu = static_cast<uint32_t>(std::stoul(value));
    } else if (flag == "--buffers-per-gpu") {
      o.buffers_per_gpu = static_cast<uint32_t>(std::stoul(value));
    } else {
      throw UsageError("unknown flag " + flag);
    }
  }
  if (o.server.empty() || o.mode.empty()) throw UsageError("needs --server and --mode");
  return o;
}

// The bystander of forged mode, in a process of its own: an endpoint of the
// provider with memory registered for remote writes, filled with a
// pattern, and receives posted so that whatever the server sends there
// is taken (and never shown to the attacker).
struct Bystander {
  explicit Bystander(const fi_info& info)
      : net(info),
        memory(Buffer::Allocate(MemoryKind::kHost, -1, 1 << 20)),
        region(net.Register(memory)),
        inbox(Buffer::Allocate(MemoryKind::kHost, -1, kInboxSlots * kSlotSize)),
        inbox_region(net.Register(inbox)) {
    std::vector<uint8_t> pattern(memory.size(), kPattern);
    memory.CopyFromHost(0, pattern.data(), pattern.size());
    for (size_t slot = 0; slot < kInboxSlots; ++slot) Listen(slot);
  }
  ~Bystander() { Recovery::CloseEndpoint(net); }  // before the buffers go
  void Listen(size_t slot) {
    char* buf = static_cast<char*>(inbox.data()) + slot * kSlotSize;
    net.PostRecv(buf, kSlotSize, inbox_region.desc(), [this, slot](Network&, RdmaOp& op) {
      if (op.error == FI_ECANCELED) return;
      if (op.ok()) {
        try {
          const auto* data = static_cast<const uint8_t*>(op.buf);
          challenges += DecodeHeader(data, op.received).type == MessageType::kChallenge;
        } catch (const ProtocolError&) {
        }
        ++received;
      }
      Listen(slot);
    });
  }
  // Bytes of the pattern that changed.
  size_t Changed() const {
    std::vector<uint8_t> now(memory.size());
    memory.CopyToHost(0, now.data(), now.size());
    size_t changed = 0;
    for (uint8_t byte : now) changed += byte != kPattern;
    return changed;
  }
  static constexpr uint8_t kPattern = 0xB5;
  static constexpr size_t kInboxSlots = 8;
  static constexpr size_t kSlotSize = 8192;
  Network net;
  Buffer memory;
  MemoryRegion region;
  Buffer inbox;
  MemoryRegion inbox_region;
  size_t received = 0;
  size_t challenges = 0;
};

// Reads one line from `fd` within `seconds`; "" at its end or timeout.
std::string ReadLine(int fd, double seconds) {
  std::string line;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(seconds));
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char c;
    if (read(fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line.push_back(c);
  }
  return "";
}

void WriteLine(int fd, const std::string& line) {
  std::string text = line + "\n";
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    throw RuntimeError("bystander: cannot write to its pipe");
  }
}

// The bystander process: says its address and region, takes whatever
// comes until the attacker says it is done (or its pipe closes), then
// reports whether any byte of its memory changed. Returns the exit code.
int RunBystander(const Options& o, int to_attacker, int from_attacker) {
  try {
    std::vector<FiInfoPtr> infos =
        FindNics(FabricChoice{o.provider, MemoryKind::kHost, o.provider == "tcp" ? "lo" : ""});
    Bystander bystander(*infos[0]);
    WriteLine(to_attacker, ToHex(bystander.net.address()) + " " +
                               std::to_string(bystander.region.remote_addr()) + " " +
                               std::to_string(bystander.region.size()) + " " +
                               std::to_string(bystander.region.key()));
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(o.seconds + 30));
    for (;;) {
      bystander.net.PollCompletion();
      pollfd p{from_attacker, POLLIN, 0};
      if (poll(&p, 1, 0) != 0 || Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    // Writes that were under way land within moments.
    auto settle = Clock::now() + std::chrono::seconds(1);
    while (Clock::now() < settle) {
      bystander.net.PollCompletion();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    size_t changed = bystander.Changed();
    WriteLine(to_attacker, std::to_string(changed) + " " + std::to_string(bystander.received) +
                               " " + std::to_string(bystander.challenges));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attacker: bystander: error: %s\n", e.what());
    return 1;
  }
}

class Attacker {
 public:
  explicit Attacker(const Options& o)
      : o_(o),
        infos_(
            FindNics(FabricChoice{o.provider, MemoryKind::kHost, o.provider == "tcp" ? "lo" : ""})),
        net_(*infos_[0]),
        send_buffer_(Buffer::Allocate(MemoryKind::kHost, -1, kSlots * kSlotSize)),
        send_region_(net_.Register(send_buffer_)),
        target_(Buffer::Allocate(MemoryKind::kHost, -1, 1 << 20)),
        target_region_(net_.Register(target_)),
        rng_(std::random_device{}()) {
    server_ = net_.AddPeer(FromHex(o.server));
  }
  ~Attacker() { Recovery::CloseEndpoint(net_); }  // before the buffers go

  // What the bystander process said of itself (forged mode).
  struct Victim {
    std::vector<uint8_t> address;
    RemoteRegion region;
  };
  void Target(const Victim* victim) { bystander_ = victim; }

  size_t Run() {
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(o_.seconds));
    if (o_.mode == "stop") {
      // A session the server keeps (it may be busy: then again, 2 s later).
      while (!challenged_ && Clock::now() < end) {
        Session session = NewSession();
        challenge_for_ = session.nonce;
        ListenForChallenge();
        SendNow(Encode(Connect(), session));
        auto deadline = Clock::now() + std::chrono::seconds(2);
        while (!challenged_ && Clock::now() < deadline) net_.PollCompletion();
        if (!challenged_) continue;
        RandomFillRequest fill = Fill();
        fill.cookie = challenge_cookie_;
        SendNow(Encode(fill, session));
      }
      if (!challenged_) throw RuntimeError("no CHALLENGE came");
      std::printf("attacker: stopped reading after its RANDOM_FILL\n");
      std::fflush(stdout);
      // No progress from here on: the server's writes find nobody reading.
      while (Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return sent_;
    }
    if (o_.mode == "forgotten") return ProbeUntilBusy(end);
    if (o_.mode == "forged") return Forge(end);
    if (o_.mode == "nic-forged") return ForgeOtherNics(end);
    if (o_.mode == "guessed-keys") return GuessKeys(end);
    if (o_.mode == "cookie-rtt") return TimeChallenges(end);
    auto next = Clock::now();
    while (Clock::now() < end) {
      net_.PollCompletion();
      if (o_.mode == "owed") {
        if (Clock::now() >= next) {
          next += std::chrono::duration_cast<Clock::duration>(
              std::chrono::duration<double>(o_.interval));
          SendNow(Encode(Connect(), NewSession()));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      if (net_.outstanding_transmits() + net_.pending() >= kSlots) continue;
      if (o_.mode == "fills") {
        Post(Encode(Fill(), NewSession()));
      } else if (o_.mode == "connects") {
        Post(Encode(Connect(), NewSession()));
      } else if (o_.mode == "malformed") {
        Post(Malformed());
      } else if (o_.mode == "spoofed") {
        Post(Spoofed());
      } else {
        throw UsageError("unknown --mode " + o_.mode);
      }
    }
    return sent_;
  }

 private:
  static constexpr size_t kSlots = 64;
  static constexpr size_t kSlotSize = 8192;

  Session NewSession() { return Session{rng_() | 1, net_.address()}; }

  // The server must never write to an address that did not prove it
  // receives there: no guessed cookie may pair a CONNECT that declares the
  // bystander (another process) with a RANDOM_FILL.
  size_t Forge(Clock::time_point end) {
    if (bystander_ == nullptr) throw UsageError("--mode forged needs its bystander");
    ConnectMessage connect = Connect();
    for (auto& address : connect.nic_addresses) address = bystander_->address;
    for (auto& region : connect.regions) region = bystander_->region;
    while (Clock::now() < end) {
      net_.PollCompletion();
      if (net_.outstanding_transmits() + net_.pending() + 2 > kSlots) continue;
      Session forged{rng_() | 1, bystander_->address};
      RandomFillRequest fill = Fill();
      fill.cookie = rng_() | 1;  // a guess: the bystander keeps the real one
      Post(Encode(connect, forged));
      Post(Encode(fill, forged));
    }
    return sent_;
  }

  // NIC 0 is ours and proven; NIC 1 on are the bystander's. The server
  // sends the bystander a CHALLENGE of its own, which we never see: the
  // cookie we echo (NIC 0's) must not be enough.
  size_t GuessKeys(Clock::time_point end) {
    if (bystander_ == nullptr) throw UsageError("--mode guessed-keys needs its bystander");
    fi_addr_t victim = net_.AddPeer(bystander_->address);
    std::memset(send_buffer_.data(), 0x5A, kSlotSize);
    size_t tries = 0;
    while (Clock::now() < end) {
      if (net_.pending() < 64) {
        RdmaWrite write;
        write.local = send_buffer_.data();
        write.length = 64;
        write.local_desc = send_region_.desc();
        write.peer = victim;
        write.remote_addr = bystander_->region.addr;
        write.remote_key = tries < 4096 ? tries : rng_();
        net_.PostWrite(write, [](Network&, RdmaOp&) {});
        ++tries;
      }
      net_.PollCompletion();
    }
    auto settle = Clock::now() + std::chrono::seconds(5);
    while (net_.outstanding_transmits() + net_.pending() > 0 && Clock::now() < settle) {
      net_.PollCompletion();
    }
    return tries;
  }

  size_t ForgeOtherNics(Clock::time_point end) {
    if (bystander_ == nullptr) throw UsageError("--mode nic-forged needs its bystander");
    if (o_.gpus * o_.nics_per_gpu < 2) throw UsageError("--mode nic-forged needs 2 NICs or more");
    ConnectMessage connect = Connect();
    for (size_t i = 1; i < connect.nic_addresses.size(); ++i) {
      connect.nic_addresses[i] = bystander_->address;
    }
    for (size_t r = o_.buffers_per_gpu; r < connect.regions.size(); ++r) {
      connect.regions[r] = bystander_->region;
    }
    size_t challenged = 0, fills = 0;
    while (Clock::now() < end) {
      Session session = NewSession();
      challenge_for_ = session.nonce;
      challenged_ = false;
      ListenForChallenge();
      auto sent = Clock::now();
      SendNow(Encode(connect, session));
      auto deadline = sent + std::chrono::seconds(2);
      while (!challenged_ && Clock::now() < deadline) net_.PollCompletion();
      if (challenged_) {
        ++challenged;
        RandomFillRequest fill = Fill();
        fill.cookie = challenge_cookie_;  // NIC 0's cookie, echoed as a client does
        SendNow(Encode(fill, session));
        ++fills;
      }
      // The server sends one CHALLENGE per address and 100 ms.
      auto next = sent + std::chrono::milliseconds(150);
      while (Clock::now() < next) {
        net_.PollCompletion();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    std::printf("attacker: %zu CHALLENGE(s) heard, %zu RANDOM_FILL(s) echoing them\n", challenged,
                fills);
    return sent_;
  }

  size_t ProbeUntilBusy(Clock::time_point end) {
    Session session = NewSession();
    ListenForBusy();
    SendNow(Encode(Connect(), session));
    const auto start = Clock::now();
    auto next_probe = start;
    while (!heard_busy_ && Clock::now() < end) {
      if (Clock::now() >= next_probe) {
        next_probe += std::chrono::seconds(2);
        SendNow(EncodeEmpty(MessageType::kProbe, session));
      }
      net_.PollCompletion();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!heard_busy_) throw RuntimeError("no BUSY for a session whose RANDOM_FILL was lost");
    std::printf("attacker: heard BUSY after %.1f s\n",
                std::chrono::duration<double>(Clock::now() - start).count());
    return sent_;
  }

  size_t TimeChallenges(Clock::time_point end) {
    if (o_.own_nics < 1 || o_.own_nics > o_.gpus * o_.nics_per_gpu) {
      throw UsageError("--own-nics must be 1 to the server's NIC count");
    }
    for (uint32_t i = 1; i < o_.own_nics; ++i)
      own_nics_.push_back(std::make_unique<OwnNic>(*infos_[0]));
    ConnectMessage connect = Connect();
    for (size_t i = 0; i < connect.nic_addresses.size(); ++i) {
      size_t k = i % o_.own_nics;
      if (k > 0) connect.nic_addresses[i] = own_nics_[k - 1]->net.address();
    }
    auto all_heard = [this] {
      if (!challenged_) return false;
      for (const auto& nic : own_nics_) {
        if (!nic->heard) return false;
      }
      return true;
    };
    auto poll_all = [this] {
      net_.PollCompletion();
      for (const auto& nic : own_nics_) nic->net.PollCompletion();
    };
    std::vector<double> micros;
    while (Clock::now() < end) {
      Session session = NewSession();
      challenge_for_ = session.nonce;
      challenged_ = false;
      ListenForChallenge();
      for (const auto& nic : own_nics_) {
        nic->heard = false;
        Listen(*nic);
      }
      auto sent = Clock::now();
      Post(Encode(connect, session));
      auto deadline = sent + std::chrono::seconds(2);
      while (!all_heard() && Clock::now() < deadline) poll_all();
      if (all_heard()) {
        micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - sent).count());
      }
      // The server sends one CHALLENGE per address and 100 ms.
      auto next = sent + std::chrono::milliseconds(110);
      while (Clock::now() < next) poll_all();
    }
    if (micros.empty()) throw RuntimeError("no CHALLENGE came");
    double first = micros.front();
    std::sort(micros.begin(), micros.end());
    if (own_nics_.empty()) {
      std::printf("attacker: %zu CHALLENGE(s): first %.0f us, median %.0f us, 90%% %.0f us\n",
                  micros.size(), first, micros[micros.size() / 2], micros[micros.size() * 9 / 10]);
    } else {
      std::printf(
          "attacker: %zu round(s) of %u CHALLENGEs: first %.0f us, median %.0f us, 90%% %.0f "
          "us\n",
          micros.size(), o_.own_nics, first, micros[micros.size() / 2],
          micros[micros.size() * 9 / 10]);
    }
    return sent_;
  }

  // cookie-rtt's NIC 1 on: an endpoint of ours with one receive.
  struct OwnNic {
    explicit OwnNic(const fi_info& info)
        : net(info),
          inbox(Buffer::Allocate(MemoryKind::kHost, -1, kSlotSize)),
          inbox_region(net.Register(inbox)) {}
    ~OwnNic() { Recovery::CloseEndpoint(net); }  // before the buffer goes
    Network net;
    Buffer inbox;
    MemoryRegion inbox_region;
    bool listening = false;
    bool heard = false;  // the CHALLENGE of the session `challenge_for_`
  };

  void Listen(OwnNic& nic) {
    if (nic.listening) return;
    nic.listening = true;
    nic.net.PostRecv(
        nic.inbox.data(), kSlotSize, nic.inbox_region.desc(), [this, &nic](Network&, RdmaOp& op) {
          nic.listening = false;
          if (op.error != 0) return;
          try {
            const auto* data = static_cast<const uint8_t*>(op.buf);
            MessageHeader header = DecodeHeader(data, op.received);
            nic.heard |=
                header.type == MessageType::kChallenge && header.session.nonce == challenge_for_;
          } catch (const ProtocolError&) {
          }
          Listen(nic);
        });
  }

  // One receive for the CHALLENGE of the session `challenge_for_`.
  void ListenForChallenge() {
    if (listening_) return;
    listening_ = true;
    net_.PostRecv(target_.data(), kSlotSize, target_region_.desc(), [this](Network&, RdmaOp& op) {
      listening_ = false;
      if (op.error != 0) return;
      try {
        const auto* data = static_cast<const uint8_t*>(op.buf);
        MessageHeader header = DecodeHeader(data, op.received);
        if (header.type == MessageType::kChallenge && header.session.nonce == challenge_for_) {
          challenge_cookie_ = DecodeChallenge(data, op.received).cookie;
          challenged_ = true;
        }
      } catch (const ProtocolError&) {
      }
      ListenForChallenge();
    });
  }

  // Replies until a BUSY (a CHALLENGE comes first: the CONNECT was kept).
  void ListenForBusy() {
    net_.PostRecv(target_.data(), kSlotSize, target_region_.desc(), [this](Network&, RdmaOp& op) {
      if (op.error != 0) return;
      try {
        const auto* data = static_cast<const uint8_t*>(op.buf);
        heard_busy_ = DecodeHeader(data, op.received).type == MessageType::kBusy;
      } catch (const ProtocolError&) {
      }
      if (!heard_busy_) ListenForBusy();
    });
  }

  // The server's layout; every region is our one buffer.
  ConnectMessage Connect() const {
    ConnectMessage m;
    m.num_gpus = o_.gpus;
    m.nics_per_gpu = o_.nics_per_gpu;
    m.buffers_per_gpu = o_.buffers_per_gpu;
    for (uint32_t i = 0; i < o_.gpus * o_.nics_per_gpu; ++i) {
      m.nic_addresses.push_back(net_.address());
      for (uint32_t b = 0; b < o_.buffers_per_gpu; ++b) {
        m.regions.push_back(RemoteRegion{target_region_.remote_addr(), target_region_.size(),
                                         target_region_.key()});
      }
    }
    return m;
  }

  // 1000 pages of 8 bytes: as long as a default client's request.
  RandomFillRequest Fill() {
    RandomFillRequest r;
    r.remote_context = static_cast<uint32_t>(rng_()) | 1;
    r.seed = rng_();
    r.page_size = 8;
    for (uint32_t i = 0; i < 1000; ++i) r.page_indices.push_back(i);
    return r;
  }

  // Alternately: a CONNECT whose NIC 1 address the provider must refuse,
  // and a RANDOM_FILL whose session names a random address.
  std::vector<uint8_t> Malformed() {
    if (++malformed_ % 2 == 0) {
      ConnectMessage m = Connect();
      if (o_.provider == "shm") {
        std::string name = malformed_ % 4 == 0 ? "fi_shm://999999:0:0" : "fi_shm";
        m.nic_addresses.back().assign(name.begin(), name.end());
        if (malformed_ % 4 == 0) m.nic_addresses.back().push_back(0);
      } else {
        m.nic_addresses.back() = {2, 0, 0, 1};  // 4 bytes are no sockaddr_in
      }
      return Encode(m, NewSession());
    }
    Session stranger{rng_() | 1, net_.address()};
    for (auto& byte : stranger.address) byte = static_cast<uint8_t>(rng_());
    return Encode(Fill(), stranger);
  }

  // A CONNECT whose session and NICs all name this host at a random port
  // (bytes 2-3 of a sockaddr_in): well-formed, so the server cannot tell it
  // from a client's until it tries to answer.
  std::vector<uint8_t> Spoofed() {
    if (o_.provider != "tcp") throw UsageError("--mode spoofed is for tcp");
    std::vector<uint8_t> nobody = net_.address();
    if (nobody.size() < 4) throw UsageError("this endpoint's address is no sockaddr");
    uint16_t port = static_cast<uint16_t>(1024 + rng_() % 60000);
    nobody[2] = static_cast<uint8_t>(port >> 8);
    nobody[3] = static_cast<uint8_t>(port);
    ConnectMessage m = Connect();
    for (auto& address : m.nic_addresses) address = nobody;
    return Encode(m, Session{rng_() | 1, nobody});
  }

  void Post(const std::vector<uint8_t>& message) {
    if (message.size() > kSlotSize) throw UsageError("message too long for a slot");
    char* slot = static_cast<char*>(send_buffer_.data()) + (next_slot_++ % kSlots) * kSlotSize;
    std::memcpy(slot, message.data(), message.size());
    net_.PostSend(server_, slot, message.size(), send_region_.desc(), [](Network&, RdmaOp&) {});
    ++sent_;
  }

  // Sends one message and waits (10 s at most) until the provider took it.
  void SendNow(const std::vector<uint8_t>& message) {
    Post(message);
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (net_.outstanding_transmits() + net_.pending() > 0 && Clock::now() < deadline) {
      net_.PollCompletion();
    }
  }

  const Options& o_;
  std::vector<FiInfoPtr> infos_;
  Network net_;
  Buffer send_buffer_;
  MemoryRegion send_region_;
  Buffer target_;
  MemoryRegion target_region_;
  std::mt19937_64 rng_;
  fi_addr_t server_ = FI_ADDR_UNSPEC;
  size_t next_slot_ = 0;
  size_t sent_ = 0;
  size_t malformed_ = 0;
  const Victim* bystander_ = nullptr;
  std::vector<std::unique_ptr<OwnNic>> own_nics_;  // cookie-rtt with --own-nics
  bool heard_busy_ = false;
  uint64_t challenge_for_ = 0;  // cookie-rtt, nic-forged
  uint64_t challenge_cookie_ = 0;
  bool challenged_ = false;
  bool listening_ = false;
};

}  // namespace
}  // namespace tutorial

namespace tutorial {
namespace {

// Forged modes: the bystander runs in a child process, forked before this
// process touches libfabric. Returns the attacker's exit code.
int RunForged(const Options& options) {
  int up[2], down[2];  // bystander to attacker, attacker to bystander
  if (pipe(up) != 0 || pipe(down) != 0) throw RuntimeError("pipe failed");
  pid_t child = fork();
  if (child < 0) throw RuntimeError("fork failed");
  if (child == 0) {
    close(up[0]);
    close(down[1]);
    _exit(RunBystander(options, up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  auto end_child = [&] {
    close(down[1]);  // the bystander's sign to finish
    int status = 0;
    waitpid(child, &status, 0);
    close(up[0]);
  };
  try {
    std::istringstream said(ReadLine(up[0], 30));
    std::string hex;
    Attacker::Victim victim;
    said >> hex >> victim.region.addr >> victim.region.size >> victim.region.key;
    if (hex.empty() || !said) throw RuntimeError("the bystander did not start");
    victim.address = FromHex(hex);
    auto start = Clock::now();
    size_t sent;
    {
      Attacker attacker(options);
      attacker.Target(&victim);
      sent = attacker.Run();
    }
    close(down[1]);
    down[1] = -1;
    std::istringstream result(ReadLine(up[0], 30));
    size_t changed = 0, received = 0, challenges = 0;
    result >> changed >> received >> challenges;
    if (!result) throw RuntimeError("the bystander did not report");
    int status = 0;
    waitpid(child, &status, 0);
    close(up[0]);
    std::printf("attacker: sent %zu message(s) in %.1f s\n", sent,
                std::chrono::duration<double>(Clock::now() - start).count());
    if (changed > 0) {
      std::fprintf(stderr,
                   "attacker: error: the server wrote %zu byte(s) into the bystander's memory\n",
                   changed);
      return 1;
    }
    std::printf(
        "attacker: the bystander (process %d) is untouched (%zu message(s) reached it, %zu of "
        "them CHALLENGEs)\n",
        static_cast<int>(child), received, challenges);
    return 0;
  } catch (...) {
    if (down[1] >= 0) {
      end_child();
    } else {
      kill(child, SIGKILL);  // it did not report: the server sweeps its files
      waitpid(child, nullptr, 0);
      close(up[0]);
    }
    throw;
  }
}

}  // namespace
}  // namespace tutorial

int main(int argc, char** argv) {
  try {
    tutorial::Options options = tutorial::Parse(argc, argv);
    if (options.mode == "forged" || options.mode == "nic-forged" ||
        options.mode == "guessed-keys") {
      return tutorial::RunForged(options);
    }
    auto start = std::chrono::steady_clock::now();
    size_t sent;
    {
      tutorial::Attacker attacker(options);
      sent = attacker.Run();
      std::printf("attacker: sent %zu message(s) in %.1f s\n", sent,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attacker: error: %s\n", e.what());
    return 1;
  }
}
