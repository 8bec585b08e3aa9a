#include "harness/exercise_hooks.h"

#include <atomic>
#include <chrono>
#include <thread>

namespace tutorial {
namespace {

std::atomic<bool> gpu0_posted{false};
std::atomic<size_t> writer_threads_ended{0};

}  // namespace

void ResetStagedFailure() {
  gpu0_posted = false;
  writer_threads_ended = 0;
}

void NoteWriterThreadEnded() { ++writer_threads_ended; }

bool StagedFailureAfterWarmup(size_t gpu_idx) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  if (gpu_idx == 1) {
    while (!gpu0_posted.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    return true;
  }
  if (gpu_idx == 0) {
    gpu0_posted.store(true);
    while (writer_threads_ended.load() == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace tutorial
