// Bad input never crashes or hangs: one line on stderr, exit 2 for usage
// errors, 1 for runtime errors, and a server that refuses a request keeps
// serving the next client. Uses chapter 10's real binaries.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <memory>

#include "tests/process.h"

namespace tutorial::testing {
namespace {

const std::string kServer = BinaryPath("chapters/10_warmup/server");
const std::string kClient = BinaryPath("chapters/10_warmup/client");

// Exactly one line on stderr, naming the problem.
void ExpectOneLineError(const RunResult& r, int exit_code, const std::string& mentions) {
  EXPECT_EQ(r.exit_code, exit_code) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(mentions), std::string::npos) << r.err;
}

RunResult Client(std::vector<std::string> args, double seconds = 30) {
  args.insert(args.begin(), kClient);
  return RunToEnd(args, seconds);
}

// A chapter 10 server over `provider` with 1 MiB host buffers, its output in
// `dir`; `address` is set once it announced one.
std::unique_ptr<Process> StartServer(const std::string& provider, const TempDir& dir,
                                     std::string& address) {
  auto server = std::make_unique<Process>(
      std::vector<std::string>{kServer, "--provider", provider, "--memory", "host", "--buffer-size",
                               "1048576", "--repeat", "2", "--address-file", dir.File("address")},
      dir.File("server.out"), dir.File("server.err"));
  if (WaitForFile(dir.File("address"), 30)) {
    address = ReadFile(dir.File("address"));
    address.erase(address.find_last_not_of('\n') + 1);
  }
  return server;
}

TEST(BadInputTest, HelpExitsZero) {
  for (const auto& binary : {kServer, kClient}) {
    RunResult r = RunToEnd({binary, "--help"}, 10);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("--provider"), std::string::npos) << r.out;
    EXPECT_TRUE(r.err.empty()) << r.err;
  }
}

TEST(BadInputTest, UnknownFlag) {
  ExpectOneLineError(RunToEnd({kServer, "--bogus"}, 10), 2, "--bogus");
  ExpectOneLineError(Client({"--server", "00", "--frobnicate", "1"}), 2, "--frobnicate");
}

TEST(BadInputTest, BadValues) {
  ExpectOneLineError(RunToEnd({kServer, "--provider", "carrier-pigeon"}, 10), 2, "--provider");
  ExpectOneLineError(RunToEnd({kServer, "--repeat", "0"}, 10), 2, "--repeat");
  ExpectOneLineError(Client({"--server", "00", "--gpus", "-1"}), 2, "--gpus");
  ExpectOneLineError(Client({"--server", "00", "--page-size", "0"}), 2, "--page-size");
  ExpectOneLineError(Client({"--server", "00", "--page-size", "12"}), 2, "multiple of 8");
  ExpectOneLineError(Client({"--server", "00", "--buffer-size", "1048576", "--page-size", "4096",
                             "--pages", "257"}),
                     2, "--pages");
  ExpectOneLineError(Client({"--page-size", "4096"}), 2, "--server is required");
  ExpectOneLineError(Client({"--server", "00", "--poll-threads", "cpu"}), 2, "--poll-threads");
}

TEST(BadInputTest, UnparsableServerAddress) {
  ExpectOneLineError(Client({"--server", "xyz0"}), 2, "not hex");
  ExpectOneLineError(Client({"--server", "abc"}), 2, "odd number");
  ExpectOneLineError(Client({"--server", std::string(1024, 'a')}), 2, "longer than");
}

TEST(BadInputTest, AddressTheProviderRefuses) {
  // Four bytes are no socket address.
  ExpectOneLineError(Client({"--provider", "tcp", "--memory", "host", "--server", "02000001"}), 2,
                     "--server");
}

TEST(BadInputTest, UnreachableServerGivesUpInBoundedTime) {
  // 127.0.0.1 port 1 (sockaddr_in: family 2, port big-endian, address).
  RunResult tcp = Client({"--provider", "tcp", "--memory", "host", "--connect-timeout", "2",
                          "--server", "020000017f0000010000000000000000"},
                         20);
  // Nobody listens: the provider never connects, so it never takes the
  // CONNECT.
  ExpectOneLineError(tcp, 1, "did not take it within 2 s: it has no connection to the server");
  // An shm name nobody owns.
  std::string name = "fi_shm://424242:0:0";
  std::vector<uint8_t> bytes(name.begin(), name.end());
  bytes.push_back(0);
  std::string hex;
  for (uint8_t b : bytes) {
    static const char* digits = "0123456789abcdef";
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  RunResult shm = Client(
      {"--provider", "shm", "--memory", "host", "--connect-timeout", "2", "--server", hex}, 20);
  EXPECT_TRUE(shm.exit_code == 1 || shm.exit_code == 2) << shm.err;
  EXPECT_EQ(std::count(shm.err.begin(), shm.err.end(), '\n'), 1) << shm.err;
}

TEST(BadInputTest, MissingProvider) {
  ExpectOneLineError(RunToEnd({kServer, "--provider", "efa"}, 20), 2, "'efa' is not available");
}

TEST(BadInputTest, CudaMemoryWithoutCuda) {
  RunResult r = RunToEnd({kServer, "--memory", "cuda", "--provider", "shm"}, 20);
  if (r.exit_code == 2 && r.err.find("without CUDA") == std::string::npos &&
      r.err.find("no usable CUDA device") == std::string::npos) {
    ADD_FAILURE() << r.err;
  }
  if (r.err.find("CUDA") != std::string::npos) ExpectOneLineError(r, 2, "CUDA");
}

// A request the server cannot serve is refused with a reason, and the same
// server then serves a good client.
TEST(BadInputTest, ServerRejectsThenServesNextClient) {
  TempDir dir;
  std::string address;
  std::unique_ptr<Process> server = StartServer("shm", dir, address);
  ASSERT_FALSE(address.empty()) << ReadFile(dir.File("server.err"));
  std::vector<std::string> shm = {"--provider", "shm", "--memory", "host", "--server", address};

  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), shm.begin(), shm.end());
    return Client(extra, 30);
  };
  // 64 pages of 64 KiB do not fit the server's 1 MiB buffers.
  ExpectOneLineError(with({"--buffer-size", "8388608", "--page-size", "65536", "--pages", "64"}), 2,
                     "exceed the server's buffer");
  // A layout that differs from the server's.
  ExpectOneLineError(
      with({"--gpus", "2", "--buffer-size", "1048576", "--page-size", "4096", "--pages", "8"}), 2,
      "server has 1 x 2 x 2");

  RunResult good = with({"--buffer-size", "1048576", "--page-size", "4096", "--pages", "256"});
  EXPECT_EQ(good.exit_code, 0) << good.out << good.err << ReadFile(dir.File("server.err"));
  EXPECT_NE(good.out.find("every byte correct"), std::string::npos);

  server->Signal(SIGINT);
  EXPECT_EQ(server->Wait(20), 0);
  std::string out = ReadFile(dir.File("server.out"));
  EXPECT_NE(out.find("1 transfer(s) served"), std::string::npos) << out;
}

// Over tcp on libfabric 1.x the front door takes each message in one of the
// provider's buffers (about 16 KB): a client refuses a RANDOM_FILL of 6000
// pages (about 24 KB) before sending it, and the server serves the next.
TEST(BadInputTest, FillLongerThanTcpBuffersIsRefusedAndTheNextIsServed) {
  TempDir dir;
  std::string address;
  std::unique_ptr<Process> server = StartServer("tcp", dir, address);
  ASSERT_FALSE(address.empty()) << ReadFile(dir.File("server.err"));
  if (ReadFile(dir.File("server.out")).find("FI_BUFFERED_RECV") == std::string::npos) {
    server->Signal(SIGINT);
    server->Wait(20);
    GTEST_SKIP() << "this libfabric's front door posts its receives (not 1.x tcp)";
  }
  std::vector<std::string> tcp = {"--provider",  "tcp",   "--memory",      "host",
                                  "--server",    address, "--buffer-size", "1048576",
                                  "--page-size", "64"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), tcp.begin(), tcp.end());
    return Client(extra, 60);
  };
  ExpectOneLineError(with({"--pages", "6000"}), 2, "ask for fewer pages");

  RunResult good = with({"--pages", "256"});
  EXPECT_EQ(good.exit_code, 0) << good.out << good.err << ReadFile(dir.File("server.err"));
  EXPECT_NE(good.out.find("every byte correct"), std::string::npos);
  server->Signal(SIGINT);
  EXPECT_EQ(server->Wait(20), 0);
}

}  // namespace
}  // namespace tutorial::testing
