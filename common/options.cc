#include "common/options.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "common/errors.h"
#include "common/messages.h"

namespace tutorial {
namespace {

void AddCommonFlags(CLI::App& app, CommonOptions* o) {
  app.add_option("--provider", o->provider,
                 "libfabric provider; auto: efa when present, else tcp; simnic: the simulated "
                 "EFA-like NIC (docs/simnic.md)")
      ->check(CLI::IsMember({"efa", "shm", "tcp", "simnic", "auto"}))
      ->capture_default_str();
  app.add_option("--memory", o->memory, "where the buffers live; auto: cuda when a GPU is usable")
      ->check(CLI::IsMember({"cuda", "host", "auto"}))
      ->capture_default_str();
  app.add_option("--domain", o->domain,
                 "use only this provider domain (e.g. a NIC name, or eth0 for tcp; tcp "
                 "defaults to lo)");
  app.add_option("--gpus", o->gpus, "number of GPU groups; 0: all GPUs (host memory: 1)")
      ->check(CLI::Range(0u, 1024u))
      ->capture_default_str();
  app.add_option("--nics-per-gpu", o->nics_per_gpu,
                 "NICs (endpoints) per group; 0: all of the group's NICs (shm, tcp: 2)")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  app.add_option("--cuda-devices", o->cuda_devices,
                 "CUDA devices to use, in group order (e.g. 1 or 2,3); default: 0, 1, ...")
      ->delimiter(',')
      ->check(CLI::Range(0, 1023));
  app.add_option("--buffer-size", o->buffer_size, "bytes per buffer (2 buffers per GPU)")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--result-json", o->result_json, "append one JSON line per finished transfer");
  app.add_flag("--print-topology", o->print_topology, "print the group table and exit");
}

// Runs CLI11 and turns its outcome into ours: help -> false, errors ->
// one-line UsageError.
bool Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return false;
  } catch (const CLI::CallForAllHelp&) {
    std::printf("%s", app.help("", CLI::AppFormatMode::All).c_str());
    return false;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  return true;
}

}  // namespace

bool ParseServerOptions(int argc, char** argv, const std::string& chapter, ServerOptions* o) {
  CLI::App app("Chapter " + chapter +
               " server: waits for clients and RDMA-WRITEs pseudo-random pages into their "
               "buffers, one client after another.");
  AddCommonFlags(app, o);
  app.add_option("--repeat", o->repeat, "how many times every page of every buffer is written")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32))
      ->capture_default_str();
  app.add_flag("--once", o->once, "serve one client, then exit with its outcome");
  app.add_option("--address-file", o->address_file, "also write the server's address (hex) here");
  return Parse(app, argc, argv);
}

bool ParseClientOptions(int argc, char** argv, const std::string& chapter, ClientOptions* o) {
  CLI::App app("Chapter " + chapter +
               " client: asks the server for RANDOM_FILL, waits for its RDMA WRITEs and "
               "verifies every byte.");
  AddCommonFlags(app, o);
  auto* server =
      app.add_option("--server", o->server, "the server's address, as it printed it (hex)");
  app.add_option("--page-size", o->page_size, "bytes per page (a multiple of 8)")
      ->capture_default_str();
  app.add_option("--pages", o->pages, "pages per buffer (a random sample of the buffer's slots)")
      ->capture_default_str();
  app.add_option("--seed", o->seed, "seed of the data and of the page sample; 0: from the clock")
      ->capture_default_str();
  app.add_option("--connect-timeout", o->connect_timeout,
                 "seconds to wait for the server to take the request")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--timeout", o->timeout, "seconds to wait for the whole transfer")
      ->check(CLI::Range(0.1, 864000.0))
      ->capture_default_str();
  app.add_option(
         "--poll-threads", o->poll_threads,
         "client threads polling the NICs: gpu (one per GPU group), nic (one per NIC) or one "
         "(a single thread for every NIC that sleeps a little when they are idle)")
      ->check(CLI::IsMember({"gpu", "nic", "one"}))
      ->capture_default_str();
  if (!Parse(app, argc, argv)) return false;
  if (!o->print_topology && server->count() == 0) {
    throw UsageError("--server is required (the hex address the server printed)");
  }
  if (!o->print_topology) FromHex(o->server);  // fail early on a malformed address
  if (o->page_size == 0 || o->page_size % 8 != 0) {
    throw UsageError("--page-size " + std::to_string(o->page_size) +
                     ": must be a positive multiple of 8");
  }
  if (o->pages == 0) throw UsageError("--pages must be at least 1");
  uint64_t slots = o->buffer_size / o->page_size;
  if (o->pages > slots) {
    throw UsageError("--pages " + std::to_string(o->pages) + " exceeds the " +
                     std::to_string(slots) + " page slots of a " + std::to_string(o->buffer_size) +
                     "-byte buffer (raise --buffer-size)");
  }
  if (slots > UINT32_MAX) throw UsageError("--buffer-size / --page-size exceeds 2^32 slots");
  return true;
}

}  // namespace tutorial
