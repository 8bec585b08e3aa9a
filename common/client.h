// The client program, the same in every chapter: it asks for RANDOM_FILL,
// waits until every NIC has reported the server's final write, then checks
// every byte it received.
#pragma once

#include <string>

namespace tutorial {

// Returns the process's exit code: 0 only when every byte verified.
int ClientMain(int argc, char** argv, const std::string& chapter);

}  // namespace tutorial
