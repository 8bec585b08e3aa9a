// Turns exceptions into the exit codes every binary promises: one line on
// stderr, 2 for usage errors, 1 for everything else; never a core dump.
#pragma once

#include <functional>

namespace tutorial {

int GuardedMain(const char* program, const std::function<int()>& body);

}  // namespace tutorial
