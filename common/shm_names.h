// The files libfabric's shm provider keeps under /dev/shm, one per endpoint,
// named "<pid>:<uid>:<index>" (its address is "fi_shm://" plus that name;
// prov/shm/src/smr_ep.c, smr_endpoint_name, the same from 1.17 to 2.x).
// Every place that reads a peer's name, and every cleanup of files a dead
// process left, goes through this parser: a name that does not parse
// exactly names nothing, so no malformed or hostile address can widen a
// cleanup to files we do not own.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tutorial {

struct ShmEndpointName {
  pid_t pid = 0;
  uid_t uid = 0;
  uint32_t index = 0;
  std::string file;  // "<pid>:<uid>:<index>", the name under /dev/shm
};

// "fi_shm://<pid>:<uid>:<index>" (an address, NUL-terminated or not) or the
// bare file name; nullopt unless all three fields are plain decimal numbers
// in range and the pid is positive.
std::optional<ShmEndpointName> ParseShmName(const std::string& name);
std::optional<ShmEndpointName> ParseShmAddress(const std::vector<uint8_t>& address);

// `text` with every byte that is not printable ASCII shown as \xNN, at most
// 80 of them: a peer's name goes into one line of our log as it is.
std::string PrintableName(const std::string& text);

// Whether `pid` is known to be gone (not merely unreachable by signals).
bool ProcessGone(pid_t pid);

// Removes, from `dir`, the files of every endpoint of the process that
// `peer` names, only if that name parses, its uid is ours, its process is
// gone, and each file parses with the same pid and uid and is a regular
// file owned by us. Returns how many were removed.
size_t RemoveFilesOfDeadProcess(const ShmEndpointName& peer, const std::string& dir = "/dev/shm");

}  // namespace tutorial
