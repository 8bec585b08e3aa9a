// Error kinds that decide a program's exit code: every binary catches these
// in main() and prints one line, so bad input never ends in a crash.
#pragma once

#include <stdexcept>
#include <string>

namespace tutorial {

// Bad command line or a request that cannot be served: exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Something failed while running (libfabric, CUDA, the peer): exit code 1.
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The provider is left in a state the process cannot repair (an endpoint
// that cannot be rebuilt): exit code 3, as for a stuck or faulting
// provider call (harness/main_guard.h), so a supervisor starts a new process.
class ProviderError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// A message from the network that breaks the protocol. The server logs and
// drops it; it is never fatal for a long-running server.
class ProtocolError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

}  // namespace tutorial
