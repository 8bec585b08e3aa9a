#include "common/server.h"

#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <optional>

#include "common/errors.h"
#include "common/main_guard.h"
#include "common/options.h"
#include "common/random_fill.h"
#include "common/result_json.h"
#include "common/shutdown.h"

namespace tutorial {

WriteJob::WriteJob(Node& node, const ConnectMessage& connect, const RandomFillRequest& request,
                   uint64_t repeat, std::vector<fi_addr_t> peers, ProgressLine& progress)
    : node_(node),
      connect_(connect),
      request_(request),
      repeat_(repeat),
      peers_(std::move(peers)),
      progress_(progress),
      num_gpus_(node.num_gpus()),
      nics_per_gpu_(node.nics_per_gpu()),
      buffers_per_gpu_(node.buffers_per_gpu()) {}

RdmaWrite WriteJob::MakeWrite(size_t gpu, size_t nic, size_t buf, size_t page) const {
  const uint64_t page_size = request_.page_size;
  const RemoteRegion& remote = connect_.region(gpu, nic, buf);
  RdmaWrite write;
  write.local = static_cast<const char*>(node_.buffer(gpu, buf).data()) + page * page_size;
  write.length = page_size;
  write.local_desc = node_.region(gpu, nic, buf).desc();
  write.peer = peers_[gpu * nics_per_gpu_ + nic];
  write.remote_addr = remote.addr + uint64_t{request_.page_indices[page]} * page_size;
  write.remote_key = remote.key;
  return write;
}

bool WriteJob::Interrupted() const { return StopRequested(); }

void WriteJob::UseGpuOnThisThread(size_t gpu) const {
  MakeCudaDeviceCurrent(node_.groups()[gpu].cuda_device);
}

bool DrainTransmits(Node& node, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    size_t in_flight = 0;
    for (size_t g = 0; g < node.num_gpus(); ++g) {
      for (size_t n = 0; n < node.nics_per_gpu(); ++n) {
        Network& net = node.net(g, n);
        try {
          net.PollCompletion();
        } catch (const std::exception&) {
          // A broken peer can make polling fail; what counts is the drain.
        }
        in_flight += net.outstanding_transmits();
      }
    }
    if (in_flight == 0) return true;
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "server: %zu operations still in flight after %.0f s\n", in_flight,
                   seconds);
      return false;
    }
  }
}

namespace {

constexpr size_t kReceiveSlots = 4;

std::string ClientCommand(const std::string& chapter, const ServerOptions& o, const Node& node,
                          const std::string& address_hex) {
  std::string command = "bazel run //chapters/" + chapter + ":client -- --server " + address_hex +
                        " --provider " + node.fabric().provider + " --memory " +
                        MemoryKindName(node.fabric().memory) + " --gpus " +
                        std::to_string(node.num_gpus()) + " --nics-per-gpu " +
                        std::to_string(node.nics_per_gpu());
  if (!o.domain.empty()) command += " --domain " + o.domain;
  return command;
}

// Serves RANDOM_FILL requests, one client at a time.
class RandomFillServer {
 public:
  RandomFillServer(const ServerOptions& options, const std::string& chapter, Node& node,
                   const WriterFn& run_writer)
      : options_(options),
        chapter_(chapter),
        node_(node),
        run_writer_(run_writer),
        nic0_(node.net(0, 0)),
        receive_buffer_(Buffer::Allocate(MemoryKind::kHost, -1, kReceiveSlots * kMaxMessageSize)),
        receive_region_(nic0_.Register(receive_buffer_)),
        reply_buffer_(Buffer::Allocate(MemoryKind::kHost, -1, kMaxRejectReason + 64)),
        reply_region_(nic0_.Register(reply_buffer_)) {}

  int Run() {
    for (size_t slot = 0; slot < kReceiveSlots; ++slot) PostReceive(slot);
    std::string address = ToHex(nic0_.address());
    std::printf("Server address: %s\n", address.c_str());
    std::printf("Start a client with:\n  %s\n", ClientCommand(chapter_, options_, node_, address).c_str());
    if (!options_.address_file.empty()) {
      std::ofstream(options_.address_file) << address << "\n";
    }
    std::printf("------\nWaiting for a client (Ctrl-C to stop).\n");
    std::fflush(stdout);

    while (!StopRequested()) {
      nic0_.PollCompletion();
      while (!mailbox_.empty()) {
        std::vector<uint8_t> message = std::move(mailbox_.front());
        mailbox_.pop_front();
        std::optional<bool> served = HandleMessage(message);
        if (served.has_value() && options_.once) return *served ? 0 : 1;
        if (StopRequested()) break;
      }
    }
    std::printf("Stopping: %zu transfer(s) served, %zu failed, %zu message(s) dropped.\n", served_,
                failed_, dropped_);
    DrainTransmits(node_, 5.0);
    return 0;
  }

 private:
  void PostReceive(size_t slot) {
    char* buf = static_cast<char*>(receive_buffer_.data()) + slot * kMaxMessageSize;
    nic0_.PostRecv(buf, kMaxMessageSize, receive_region_.desc(),
                   [this, slot, buf](Network&, RdmaOp& op) {
                     if (op.ok()) {
                       mailbox_.emplace_back(buf, buf + op.received);
                     } else if (op.error != FI_ECANCELED) {
                       ++dropped_;
                       std::fprintf(stderr, "server: dropped a message (%zu bytes): %s\n",
                                    op.received, op.error_message.c_str());
                     }
                     if (!StopRequested()) PostReceive(slot);
                   });
  }

  // Returns the transfer's outcome when the message started one.
  std::optional<bool> HandleMessage(const std::vector<uint8_t>& message) {
    // Once a CONNECT decodes, its sender has an address to send a REJECT to.
    std::optional<ConnectMessage> reply_to;
    try {
      MessageType type = PeekMessageType(message.data(), message.size());
      if (type == MessageType::kConnect) {
        reply_to = DecodeConnect(message.data(), message.size());
        CheckConnectFitsServer(*reply_to, Layout());
        connect_ = std::move(reply_to);
        std::printf("Received CONNECT: %u GPU(s) x %u NIC(s), %u buffer(s) per GPU.\n",
                    connect_->num_gpus, connect_->nics_per_gpu, connect_->buffers_per_gpu);
        return std::nullopt;
      }
      if (type != MessageType::kRandomFill) throw ProtocolError("unexpected message type");
      if (!connect_) throw ProtocolError("RANDOM_FILL before CONNECT");
      reply_to = std::move(connect_);
      connect_.reset();
      RandomFillRequest request = DecodeRandomFill(message.data(), message.size());
      CheckRequestFits(request, *reply_to, Layout());
      return Serve(*reply_to, request);
    } catch (const ProtocolError& e) {
      ++dropped_;
      std::fprintf(stderr, "server: dropped a message: %s\n", e.what());
      if (reply_to) SendReject(*reply_to, e.what());
      return std::nullopt;
    }
  }

  // Best effort: a client that sent a well-formed but unservable request
  // learns why at once instead of waiting for its timeout.
  void SendReject(const ConnectMessage& client, const std::string& reason) {
    std::vector<uint8_t> message = Encode(RejectMessage{reason});
    try {
      fi_addr_t peer = nic0_.AddPeer(client.nic_addresses[0]);
      reply_buffer_.CopyFromHost(0, message.data(), message.size());
      bool done = false;
      nic0_.PostSend(peer, reply_buffer_.data(), message.size(), reply_region_.desc(),
                     [&done](Network&, RdmaOp&) { done = true; });
      auto deadline = Clock::now() + std::chrono::seconds(2);
      while (!done && Clock::now() < deadline) nic0_.PollCompletion();
      if (!done) DrainTransmits(node_, 5.0);
      nic0_.RemovePeer(peer);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "server: could not send REJECT: %s\n", e.what());
    }
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
  bool SendDoneNotices(const WriteJob& job, const RandomFillRequest& request, std::string* error) {
    size_t done = 0;
    for (size_t g = 0; g < job.num_gpus(); ++g) {
      for (size_t n = 0; n < job.nics_per_gpu(); ++n) {
        RdmaWrite write = job.MakeWrite(g, n, 0, 0);
        write.has_cq_data = true;
        write.cq_data = request.remote_context;
        node_.net(g, n).PostWrite(write, [&done, error](Network& net, RdmaOp& op) {
          if (!op.ok() && error->empty()) *error = net.name() + ": " + op.error_message;
          ++done;
        });
      }
    }
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (done < job.num_nics()) {
      for (size_t g = 0; g < job.num_gpus(); ++g) {
        for (size_t n = 0; n < job.nics_per_gpu(); ++n) node_.net(g, n).PollCompletion();
      }
      if (Clock::now() > deadline) {
        *error = "the client did not take the final notices within 10 s";
        return false;
      }
    }
    return error->empty();
  }

  bool Serve(const ConnectMessage& connect, const RandomFillRequest& request) {
    std::printf("Received RANDOM_FILL: %llu page(s) of %llu bytes, seed %llu, repeat %llu.\n",
                static_cast<unsigned long long>(request.num_pages()),
                static_cast<unsigned long long>(request.page_size),
                static_cast<unsigned long long>(request.seed),
                static_cast<unsigned long long>(options_.repeat));
    FillBuffers(request);

    // Server NIC i talks to client NIC i.
    std::vector<fi_addr_t> peers;
    WriteOutcome outcome;
    try {
      for (size_t g = 0; g < node_.num_gpus(); ++g) {
        for (size_t n = 0; n < node_.nics_per_gpu(); ++n) {
          peers.push_back(node_.net(g, n).AddPeer(connect.nic_addresses[g * node_.nics_per_gpu() + n]));
        }
      }
    } catch (const RuntimeError& e) {
      outcome.ok = false;
      outcome.error = std::string("client address: ") + e.what();
    }

    if (outcome.ok) {
      uint64_t total = node_.num_gpus() * node_.buffers_per_gpu() * request.num_pages() * options_.repeat;
      ProgressLine progress(total, request.page_size, node_.link_gbps());
      WriteJob job(node_, connect, request, options_.repeat, peers, progress);
      outcome = run_writer_(job);
      std::string error;
      if (outcome.ok && !SendDoneNotices(job, request, &error)) {
        outcome.ok = false;
        outcome.error = error;
      }
    }
    if (!outcome.ok) DrainTransmits(node_, 10.0);
    for (size_t i = 0; i < peers.size(); ++i) {
      node_.net(i / node_.nics_per_gpu(), i % node_.nics_per_gpu()).RemovePeer(peers[i]);
    }

    if (outcome.ok) {
      ++served_;
      std::printf("Transfer done: %s in %.3f s, %.3f Gbps, %.3f Mops/s.\n",
                  FormatBytes(outcome.stats.bytes).c_str(), outcome.stats.seconds,
                  outcome.stats.gbps, outcome.stats.mops);
    } else {
      ++failed_;
      std::printf("Transfer abandoned: %s\n", outcome.error.c_str());
    }
    RecordResult(request, outcome);
    std::printf("------\nWaiting for a client (Ctrl-C to stop).\n");
    std::fflush(stdout);
    return outcome.ok;
  }

  void RecordResult(const RandomFillRequest& request, const WriteOutcome& outcome) {
    if (options_.result_json.empty()) return;
    nlohmann::json r = ResultRecord(chapter_, "server");
    r["provider"] = node_.fabric().provider;
    r["memory"] = MemoryKindName(node_.fabric().memory);
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
    AppendResult(options_.result_json, r);
  }

  const ServerOptions& options_;
  const std::string& chapter_;
  Node& node_;
  const WriterFn& run_writer_;
  Network& nic0_;
  Buffer receive_buffer_;
  MemoryRegion receive_region_;
  Buffer reply_buffer_;
  MemoryRegion reply_region_;
  std::deque<std::vector<uint8_t>> mailbox_;
  std::optional<ConnectMessage> connect_;
  size_t served_ = 0;
  size_t failed_ = 0;
  size_t dropped_ = 0;
};

}  // namespace

int ServerMain(int argc, char** argv, const std::string& chapter, const WriterFn& run_writer) {
  std::string program = chapter + "/server";
  return GuardedMain(program.c_str(), [&]() -> int {
    ServerOptions options;
    if (!ParseServerOptions(argc, argv, chapter, &options)) return 0;
    InstallStopHandlers();
    Node node(options, kBuffersPerGpu, options.buffer_size);
    node.PrintSummary(std::cout);
    std::cout.flush();
    if (options.print_topology) return 0;
    RandomFillServer server(options, chapter, node, run_writer);
    return server.Run();
  });
}

}  // namespace tutorial
