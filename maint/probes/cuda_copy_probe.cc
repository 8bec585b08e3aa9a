// cuda_copy_probe: how fast can one process copy between two GPUs the way
// libfabric's shm provider does it?
//
// For a WRITE from GPU memory into GPU memory, shm (libfabric 2.x) hands the
// target process a CUDA IPC handle; the target's progress call then runs one
// blocking cudaMemcpy on the legacy default stream for that WRITE. So every
// WRITE into one process waits for the previous one, whichever thread polls.
// This probe times exactly that copy, from T threads of one process; run it
// as several processes at once to see what separate processes (fabtests'
// fi_rma_bw pairs) get.
//
// --mode ipc-handle times the other side instead: what shm's initiator does
// for every WRITE from GPU memory before it can post it (smr_format_ipc:
// cuMemGetAddressRange on the source, then cudaIpcGetMemHandle on its base).
// Its rate bounds how many WRITEs one posting thread can hand to shm.
//
//   cuda_copy_probe --src-device 0 --dst-device 1 --size 1048576 --threads 4
//   cuda_copy_probe --mode ipc-handle --src-device 0 --size 65536 --threads 1
//
// Prints one JSON line: {"mode":..,"threads":..,"size":..,"copies":..,"seconds":..,"gbps":..,
// "mops":..}; in ipc-handle mode "copies" counts the calls made and "gbps" is
// the rate those calls would allow WRITEs of --size.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifdef TUTORIAL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

struct ProbeOptions {
  int src_device = 0;
  int dst_device = 1;
  size_t size = 1 << 20;
  long copies = 20000;  // per thread
  double max_seconds = 10;
  int threads = 1;
  std::string mode = "copy";
};

constexpr const char* kUsage =
    "usage: cuda_copy_probe [--mode copy|ipc-handle] [--src-device N] [--dst-device N]\n"
    "                       [--size BYTES] [--copies N] [--threads N] [--max-seconds S]\n"
    "copy (default): times blocking cudaMemcpy calls from src-device memory into\n"
    "dst-device memory, one after another in each of --threads threads (the copy shm's\n"
    "target does for each WRITE).\n"
    "ipc-handle: times cuMemGetAddressRange + cudaIpcGetMemHandle on src-device memory,\n"
    "--copies times per thread (what shm's initiator does for each WRITE).\n";

long ParseNumber(const std::string& flag, const char* text) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0) {
    throw std::invalid_argument(flag + ": not a non-negative integer: " + text);
  }
  return value;
}

bool Parse(int argc, char** argv, ProbeOptions* o) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return false;
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + ": unknown flag or missing value");
    const char* value = argv[++i];
    if (flag == "--mode") {
      o->mode = value;
      if (o->mode != "copy" && o->mode != "ipc-handle") {
        throw std::invalid_argument("--mode: copy or ipc-handle, not " + o->mode);
      }
    } else if (flag == "--src-device") {
      o->src_device = static_cast<int>(ParseNumber(flag, value));
    } else if (flag == "--dst-device") {
      o->dst_device = static_cast<int>(ParseNumber(flag, value));
    } else if (flag == "--size") {
      o->size = static_cast<size_t>(ParseNumber(flag, value));
    } else if (flag == "--copies") {
      o->copies = ParseNumber(flag, value);
    } else if (flag == "--threads") {
      o->threads = static_cast<int>(ParseNumber(flag, value));
    } else if (flag == "--max-seconds") {
      o->max_seconds = static_cast<double>(ParseNumber(flag, value));
    } else {
      throw std::invalid_argument("unknown flag " + flag + " (see --help)");
    }
  }
  if (o->size == 0 || o->threads < 1 || o->threads > 256 || o->copies < 1) {
    throw std::invalid_argument("--size, --copies and --threads (1..256) must be positive");
  }
  return true;
}

#ifdef TUTORIAL_HAVE_CUDA
void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// Device memory freed on scope exit.
class DeviceMemory {
 public:
  DeviceMemory(int device, size_t size) : device_(device) {
    Check(cudaSetDevice(device), "cudaSetDevice");
    Check(cudaMalloc(&data_, size), "cudaMalloc");
  }
  ~DeviceMemory() {
    cudaSetDevice(device_);
    cudaFree(data_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* data() const { return data_; }

 private:
  int device_;
  void* data_ = nullptr;
};

// Runs o.threads threads, each with `device` current, calling step(thread,
// i) up to o.copies times or until --max-seconds; returns the calls made and
// the seconds taken. A step returns false on a CUDA error.
struct LoopResult {
  long calls;
  double seconds;
};

template <typename Step>
LoopResult TimedLoop(const ProbeOptions& o, int device, const char* what, Step step) {
  std::atomic<long> calls{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration<double>(o.max_seconds);
  auto start = Clock::now();
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      if (cudaSetDevice(device) != cudaSuccess) failed = true;
      for (long i = 0; i < o.copies && !failed; ++i) {
        if (!step(t, i)) failed = true;
        calls.fetch_add(1, std::memory_order_relaxed);
        if ((i & 63) == 0 && Clock::now() > deadline) break;
      }
    });
  }
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed) throw std::runtime_error(std::string(what) + " failed");
  return {calls.load(), seconds};
}

int RunCopy(const ProbeOptions& o) {
  if (o.src_device != o.dst_device) {
    // What cudaIpcOpenMemHandle sets up in the target process: the
    // destination GPU reads the source GPU's memory over NVLink or PCIe.
    Check(cudaSetDevice(o.dst_device), "cudaSetDevice");
    cudaError_t status = cudaDeviceEnablePeerAccess(o.src_device, 0);
    if (status != cudaSuccess && status != cudaErrorPeerAccessAlreadyEnabled) {
      Check(status, "cudaDeviceEnablePeerAccess");
    }
    cudaGetLastError();
  }
  std::vector<std::unique_ptr<DeviceMemory>> sources, targets;
  for (int t = 0; t < o.threads; ++t) {
    sources.push_back(std::make_unique<DeviceMemory>(o.src_device, o.size));
    targets.push_back(std::make_unique<DeviceMemory>(o.dst_device, o.size));
  }
  // Like shm's polling thread: the target GPU is the current device.
  LoopResult r = TimedLoop(o, o.dst_device, "cudaMemcpy", [&](int t, long) {
    return cudaMemcpy(targets[t]->data(), sources[t]->data(), o.size, cudaMemcpyDefault) ==
           cudaSuccess;
  });
  double bytes = static_cast<double>(r.calls) * static_cast<double>(o.size);
  std::printf(
      "{\"mode\": \"copy\", \"src_device\": %d, \"dst_device\": %d, \"threads\": %d, "
      "\"size\": %zu, \"copies\": %ld, \"seconds\": %.6f, \"gbps\": %.3f, \"mops\": %.6f}\n",
      o.src_device, o.dst_device, o.threads, o.size, r.calls, r.seconds,
      bytes * 8 / r.seconds / 1e9, static_cast<double>(r.calls) / r.seconds / 1e6);
  return 0;
}

// The driver call libfabric makes through dlopen (it has no link-time
// dependency on libcuda either): cuMemGetAddressRange_v2.
using GetAddressRangeFn = int (*)(unsigned long long* base, size_t* size, unsigned long long ptr);

GetAddressRangeFn LoadGetAddressRange() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) throw std::runtime_error("cannot load libcuda.so.1 (no NVIDIA driver?)");
  void* fn = dlsym(lib, "cuMemGetAddressRange_v2");
  if (fn == nullptr) throw std::runtime_error("libcuda.so.1 has no cuMemGetAddressRange_v2");
  return reinterpret_cast<GetAddressRangeFn>(fn);
}

int RunIpcHandle(const ProbeOptions& o) {
  GetAddressRangeFn get_address_range = LoadGetAddressRange();
  // 64 pages per thread, walked in turn, as a chapter walks its buffer.
  constexpr size_t kPages = 64;
  std::vector<std::unique_ptr<DeviceMemory>> sources;
  for (int t = 0; t < o.threads; ++t) {
    sources.push_back(std::make_unique<DeviceMemory>(o.src_device, o.size * kPages));
  }
  // shm's posting thread has the source GPU current.
  LoopResult r =
      TimedLoop(o, o.src_device, "cuMemGetAddressRange or cudaIpcGetMemHandle", [&](int t, long i) {
        auto page =
            reinterpret_cast<unsigned long long>(sources[t]->data()) + (i % kPages) * o.size;
        unsigned long long base = 0;
        size_t length = 0;
        cudaIpcMemHandle_t handle;
        return get_address_range(&base, &length, page) == 0 &&
               cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)) == cudaSuccess;
      });
  double rate = static_cast<double>(r.calls) / r.seconds;
  std::printf(
      "{\"mode\": \"ipc-handle\", \"src_device\": %d, \"threads\": %d, \"size\": %zu, "
      "\"copies\": %ld, \"seconds\": %.6f, \"gbps\": %.3f, \"mops\": %.6f}\n",
      o.src_device, o.threads, o.size, r.calls, r.seconds,
      rate * static_cast<double>(o.size) * 8 / 1e9, rate / 1e6);
  return 0;
}

int Run(const ProbeOptions& o) {
  // Without a driver CUDA's own words are "driver version is insufficient";
  // say first what is missing, as the chapters do.
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    throw std::runtime_error(
        std::string("no usable CUDA device (driver or GPU missing)") +
        (status != cudaSuccess ? std::string(": ") + cudaGetErrorString(status) : std::string()));
  }
  if (std::max(o.src_device, o.dst_device) >= count) {
    throw std::invalid_argument("--src-device/--dst-device: this machine has " +
                                std::to_string(count) + " CUDA device(s)");
  }
  return o.mode == "copy" ? RunCopy(o) : RunIpcHandle(o);
}
#else
int Run(const ProbeOptions&) {
  std::fprintf(stderr, "cuda_copy_probe: error: built without CUDA (set CUDA_HOME and rebuild)\n");
  return 1;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  try {
    ProbeOptions options;
    if (!Parse(argc, argv, &options)) return 0;
    return Run(options);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "cuda_copy_probe: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_copy_probe: error: %s\n", e.what());
    return 1;
  }
}
