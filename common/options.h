// The command line, the same for every chapter. Parsed with CLI11; every
// binary answers --help, and a bad flag is one line on stderr and exit 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tutorial {

// Flags shared by server and client: which provider, memory and layout.
struct CommonOptions {
  std::string provider = "auto";  // efa, shm, tcp, auto
  std::string memory = "auto";    // cuda, host, auto
  std::string domain;             // only this provider domain ("lo" for tcp by default)
  uint32_t gpus = 0;              // 0: every GPU (host memory: 1)
  uint32_t nics_per_gpu = 0;      // 0: every NIC of the group (shm, tcp: 2)
  std::vector<int> cuda_devices;  // which CUDA devices, in group order; empty: from 0 up
  uint64_t buffer_size = 64ull << 20;
  std::string result_json;  // append one JSON line per transfer
  bool print_topology = false;
};

struct ServerOptions : CommonOptions {
  uint64_t repeat = 50;
  bool once = false;
  std::string address_file;
};

struct ClientOptions : CommonOptions {
  std::string server;
  uint64_t page_size = 65536;
  uint64_t pages = 1000;
  uint64_t seed = 0;            // 0: pick one from the clock
  double connect_timeout = 10;  // seconds to reach the server
  double timeout = 300;         // seconds to wait for the whole transfer
  // Who polls the client's NICs: one thread per GPU group ("gpu"), one per
  // NIC ("nic"), or one thread for all that backs off when idle ("one", for
  // providers whose NIC moves the data: it leaves the cores to the server's
  // writers on a small machine); see WaitForNotices.
  std::string poll_threads = "gpu";
};

// Both return false when the program should exit 0 right away (--help).
// They throw UsageError for anything wrong on the command line.
bool ParseServerOptions(int argc, char** argv, const std::string& chapter, ServerOptions* options);
bool ParseClientOptions(int argc, char** argv, const std::string& chapter, ClientOptions* options);

// The two buffers per GPU of the series.
constexpr uint32_t kBuffersPerGpu = 2;

}  // namespace tutorial
