// Ctrl-C and SIGTERM ask the program to stop; loops check StopRequested()
// and unwind normally, so every libfabric and CUDA handle is closed by its
// destructor (and shm leaves no files behind).
#pragma once

namespace tutorial {

void InstallStopHandlers();
bool StopRequested();

}  // namespace tutorial
