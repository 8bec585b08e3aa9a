// Memory that libfabric reads from and writes into: page-aligned host memory
// or CUDA device memory. The chapters never care which one they hold; only
// filling and verifying need to copy through the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tutorial {

enum class MemoryKind { kHost, kCuda };

const char* MemoryKindName(MemoryKind kind);

// True when this binary was built against a CUDA toolkit.
bool BuiltWithCuda();
// Number of CUDA devices usable now (0 without CUDA, a driver or a GPU).
int CudaDeviceCount();
// "0000:53:00.0" for a CUDA device.
std::string CudaPciAddress(int device);
// Makes `device` the calling thread's current CUDA device (no-op for -1 or
// without CUDA). A new thread starts on device 0, and providers make CUDA
// calls from whatever thread polls them: shm's CUDA IPC copies issued from
// the wrong device ran 5-10x slower in our GPU runs.
void MakeCudaDeviceCurrent(int device);

class Buffer {
 public:
  // Host memory is aligned to 4 KiB (EFA needs 128 bytes; pages cost nothing
  // more). CUDA memory comes from cudaMalloc on `cuda_device`. Both start
  // zeroed so that data which never arrived cannot pass verification.
  static Buffer Allocate(MemoryKind kind, int cuda_device, size_t size);

  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  MemoryKind kind() const { return kind_; }
  int cuda_device() const { return cuda_device_; }

  // A dma-buf file descriptor for the CUDA allocation, -1 when the driver
  // offers none (or for host memory). Created on first use, closed with the
  // buffer.
  int DmabufFd() const;

  void CopyFromHost(size_t offset, const void* src, size_t length);
  void CopyToHost(size_t offset, void* dst, size_t length) const;

 private:
  Buffer(MemoryKind kind, int cuda_device, void* data, size_t size);
  void Release() noexcept;

  MemoryKind kind_ = MemoryKind::kHost;
  int cuda_device_ = -1;
  void* data_ = nullptr;
  size_t size_ = 0;
  mutable int dmabuf_fd_ = -2;  // -2: not asked yet
};

}  // namespace tutorial
