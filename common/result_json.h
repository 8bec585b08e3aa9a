// One JSON object per finished transfer, appended as a line to the file
// given by --result-json: what tools/compare reads to build its tables.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tutorial {

// Adds the fields every record carries: host, libfabric version, time.
nlohmann::json ResultRecord(const std::string& chapter, const std::string& role);

// Appends `record` as one line; throws RuntimeError when the file cannot be written.
void AppendResult(const std::string& path, const nlohmann::json& record);

}  // namespace tutorial
