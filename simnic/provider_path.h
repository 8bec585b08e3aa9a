// Lets the chapter binaries run `--provider simnic` from a fresh clone with
// no setting: libfabric finds external providers only in FI_PROVIDER_PATH
// (or its build-time folder), read once when the library initialises.
#pragma once

#include <string>

namespace simnic {

// When `provider` is "simnic" and FI_PROVIDER_PATH is unset, sets it to the
// folder that holds the built libsimnic-fi.so: this binary's runfiles, or
// bazel-bin/simnic beside it. Call before the first fi_getinfo/fi_fabric.
// Returns the folder chosen, empty when none was needed or found.
std::string UseBuiltProviderIfUnset(const std::string& provider);

}  // namespace simnic
