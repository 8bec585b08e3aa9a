// Code that exists only for an exercise's edit of a chapter, kept out of
// the lesson: the edit includes this header and calls it.
#pragma once

#include <cstddef>

namespace tutorial {

// Exercise 11.1 (docs/11_multithread.md), called right after a writer has
// posted its warmup: it makes the race between the last poster's store and
// another thread's Fail() happen the same way every time. GPU 1's thread
// waits until GPU 0's has posted and gets true (fail now); GPU 0's waits
// (30 s at most) until a writer thread has ended, then gets false; any
// other GPU's gets false at once.
bool StagedFailureAfterWarmup(size_t gpu_idx);

// The server's side: a transfer starts, a writer thread ends.
void ResetStagedFailure();
void NoteWriterThreadEnded();

}  // namespace tutorial
