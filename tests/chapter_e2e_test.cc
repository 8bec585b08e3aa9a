// End to end: the real server and client of one chapter, over a real
// libfabric provider on this machine, host memory. The client must verify
// every byte and the server must report the transfer.
//
// The chapter comes from the build (TUTORIAL_CHAPTER), so one source serves
// every chapter's test target.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/process.h"

#ifndef TUTORIAL_CHAPTER
#error "TUTORIAL_CHAPTER must name the chapter under test"
#endif

namespace tutorial::testing {
namespace {

const std::string kChapter = TUTORIAL_CHAPTER;

struct Layout {
  std::string provider;
  int gpus;
  int nics_per_gpu;
  std::string poll_threads = "gpu";  // the client's --poll-threads
};

class ChapterEndToEnd : public ::testing::TestWithParam<Layout> {};

TEST_P(ChapterEndToEnd, ClientVerifiesEveryByte) {
  const Layout& layout = GetParam();
  if (layout.provider == "simnic") {
    // The simulated NIC (docs/simnic.md) is a provider libfabric loads from
    // FI_PROVIDER_PATH; one simulated NIC per endpoint of the layout, so
    // every group's NICs share its virtual NUMA node.
    setenv("FI_PROVIDER_PATH", BinaryPath("simnic").c_str(), 1);
    setenv("SIMNIC_NICS", std::to_string(layout.gpus * layout.nics_per_gpu).c_str(), 1);
  }
  if (layout.provider == "tcp") {
    // A transfer over libfabric 2.1's tcp once stalled here and never
    // again in thousands of runs: should it come back, the failure shows
    // the provider's own warnings (a good run writes none on 2.1, five
    // lines on 1.17).
    setenv("FI_LOG_LEVEL", "warn", 0);
  }
  TempDir dir;
  std::vector<std::string> shared = {"--provider",     layout.provider,
                                     "--memory",       "host",
                                     "--gpus",         std::to_string(layout.gpus),
                                     "--nics-per-gpu", std::to_string(layout.nics_per_gpu),
                                     "--buffer-size",  "1048576"};
  std::vector<std::string> server_argv = {BinaryPath("chapters/" + kChapter + "/server"),
                                          "--once",
                                          "--repeat",
                                          "5",
                                          "--address-file",
                                          dir.File("address"),
                                          "--result-json",
                                          dir.File("server.json")};
  server_argv.insert(server_argv.end(), shared.begin(), shared.end());
  Process server(server_argv, dir.File("server.out"), dir.File("server.err"));
  ASSERT_TRUE(WaitForFile(dir.File("address"), 30))
      << ReadFile(dir.File("server.out")) << ReadFile(dir.File("server.err"));
  std::string address = ReadFile(dir.File("address"));
  address.erase(address.find_last_not_of("\n") + 1);

  std::vector<std::string> client_argv = {BinaryPath("chapters/" + kChapter + "/client"),
                                          "--server",
                                          address,
                                          "--page-size",
                                          "4096",
                                          "--pages",
                                          "200",
                                          "--seed",
                                          "12345",
                                          "--timeout",
                                          "60",
                                          "--result-json",
                                          dir.File("client.json")};
  client_argv.insert(client_argv.end(), shared.begin(), shared.end());
  client_argv.insert(client_argv.end(), {"--poll-threads", layout.poll_threads});
  RunResult client = RunToEnd(client_argv, 90);
  EXPECT_EQ(client.exit_code, 0) << client.out << client.err << ReadFile(dir.File("server.out"))
                                 << ReadFile(dir.File("server.err"));
  EXPECT_NE(client.out.find("every byte correct"), std::string::npos) << client.out;

  EXPECT_EQ(server.Wait(30), 0) << ReadFile(dir.File("server.err"));
  std::string server_out = ReadFile(dir.File("server.out"));
  if (kChapter != "09_multinet") {  // the baseline has no warmup yet
    EXPECT_NE(server_out.find("Warmup completed"), std::string::npos) << server_out;
  }
  EXPECT_NE(server_out.find("Started RDMA WRITE"), std::string::npos) << server_out;
  EXPECT_NE(server_out.find("Gbps"), std::string::npos) << server_out;
  EXPECT_NE(server_out.find("Transfer done"), std::string::npos) << server_out;

  // 2 buffers x 200 pages x 5 repeats per GPU, one JSON line per side.
  std::string server_json = ReadFile(dir.File("server.json"));
  EXPECT_NE(server_json.find("\"ops\":" + std::to_string(layout.gpus * 2 * 200 * 5)),
            std::string::npos)
      << server_json;
  EXPECT_NE(server_json.find("\"ok\":true"), std::string::npos) << server_json;
  EXPECT_NE(ReadFile(dir.File("client.json")).find("\"verified\":true"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Providers, ChapterEndToEnd,
                         ::testing::Values(Layout{"shm", 1, 2}, Layout{"shm", 2, 2},
                                           Layout{"tcp", 1, 2}, Layout{"tcp", 2, 2},
                                           Layout{"simnic", 1, 2}, Layout{"simnic", 2, 2},
                                           // A client polling thread per NIC (.ci/run
                                           // keeps these out of its TSan run: see there).
                                           Layout{"shm", 2, 2, "nic"}, Layout{"tcp", 1, 2, "nic"}),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return info.param.provider + "_" + std::to_string(info.param.gpus) +
                                  "x" + std::to_string(info.param.nics_per_gpu) +
                                  (info.param.poll_threads == "gpu" ? "" : "_poll_per_nic");
                         });

}  // namespace
}  // namespace tutorial::testing
