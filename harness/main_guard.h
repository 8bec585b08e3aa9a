// Turns failures into the exit codes every binary promises, with one line
// on stderr: 2 for usage errors, 1 for everything else, and
// kExitProviderFailed when libfabric itself failed (a call that never
// returned, a fault inside it, or a ProviderError: an endpoint that cannot
// be rebuilt); never a core dump for those.
//
// A process whose provider failed ends; it does not restart itself. Its
// state inside libfabric (locks, shared memory, sockets, threads) cannot be
// trusted, and only a new process is surely rid of it: a supervisor starts
// one (tools/serve_forever.sh, or systemd;
// docs/provider-failures.md, "Under a supervisor").
#pragma once

#include <functional>

namespace tutorial {

constexpr int kExitUsage = 2;
// A provider call got stuck or faulted: the process is fine to start again.
constexpr int kExitProviderFailed = 3;

int GuardedMain(const char* program, const std::function<int()>& body);

// A SIGSEGV or SIGBUS whose faulting instruction lies inside libfabric or
// a provider library loaded by it (lib*-fi.so) ends the process with one
// line naming the library, the offset and the known provider bugs
// (docs/provider-failures.md), and exit code kExitProviderFailed, instead of a
// backtrace file (Debian's libfabric loads libinfinipath, whose handler
// writes *.btr files into the working directory and exits 1; ours replaces
// it). A fault elsewhere is ours: the default action runs (a core dump).
// Call at the start of main, before any endpoint opens (shm's own handler
// then runs first, removes its files and calls ours).
void InstallCrashGuard(const char* program);

}  // namespace tutorial
