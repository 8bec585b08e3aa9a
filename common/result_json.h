// One JSON object per finished transfer, appended as a line to the file
// given by --result-json: what tools/compare reads to build its tables.
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

// Appends `record` as one line; throws RuntimeError when the file cannot be written.
void AppendResult(const std::string& path, const nlohmann::json& record);

}  // namespace tutorial
