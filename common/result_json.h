// One JSON object per finished transfer, appended as a line to the file
// given by --result-json: what tools/compare reads to build its tables. And
// the other file a program writes, the server's --address-file.
//
// Neither follows a symbolic link: a path in a shared folder such as /tmp
// may have been planted by another user to make us write elsewhere.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/device_rdma.h"

namespace tutorial {

// The libfabric this process runs on, which the loader picks (rpath,
// LIBFABRIC_PREFIX, LD_LIBRARY_PATH), not the headers it was built with:
// its full version ("2.1.0", from fi_tostr) and the file it was loaded from.
std::string LibfabricVersion();
std::string LibfabricPath();

// Adds the fields every record carries: host, libfabric (version and path), time.
nlohmann::json ResultRecord(const std::string& chapter, const std::string& role);

// Adds "memory" (GPU memory over emulated WRITEs is "cuda-emulated": never a
// GPU number), "device_rdma" and "emulated_write" (null where unknown).
void AddMemoryFields(nlohmann::json& record, const char* memory_kind, const DeviceRdma& rdma);

// Appends `record` as one line (O_APPEND: several processes may share the
// file); throws RuntimeError when the file cannot be written or `path` is a
// symbolic link.
void AppendResult(const std::string& path, const nlohmann::json& record);

// Replaces `path` with a file holding `text`: written to a new file of a
// random name in the same folder (mkstemp), then renamed over `path`, so a
// reader sees the old or the new text, never half of one, and a symbolic
// link at `path` is replaced, not followed. Throws RuntimeError on failure.
void WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace tutorial
