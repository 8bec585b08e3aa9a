// Ending a program cleanly, whatever happens.
//
// Ctrl-C and SIGTERM ask the program to stop; loops check StopRequested()
// and unwind normally, so every libfabric and CUDA handle is closed by its
// destructor (and shm leaves no files behind).
//
// One thing no loop of ours can end is a thread stuck inside the provider:
// libfabric 1.17's shm (and 1.22's, the code is the same) copies a message
// longer than the receive posted for it in an endless loop, holding a lock
// that every peer's next send then spins on. The ProviderWatchdog turns
// that into one line on stderr and exit code 1, with the shm files removed.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tutorial {

class Network;

void InstallStopHandlers();
bool StopRequested();

class ProviderWatchdog {
 public:
  // Watches `networks` (which must outlive it) from a thread of its own.
  ProviderWatchdog(std::string program, std::vector<Network*> networks, double stuck_seconds);
  ~ProviderWatchdog();
  ProviderWatchdog(const ProviderWatchdog&) = delete;
  ProviderWatchdog& operator=(const ProviderWatchdog&) = delete;

 private:
  void Watch();
  [[noreturn]] void ExitStuck(size_t index);

  std::string program_;
  std::vector<Network*> networks_;
  double stuck_seconds_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// Removes the files the provider keeps for `network` outside the process
// (shm's /dev/shm/<name>), for an exit that skips the destructors.
void UnlinkProviderFiles(const Network& network);

}  // namespace tutorial
