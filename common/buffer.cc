#include "common/buffer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/errors.h"

#ifdef TUTORIAL_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

namespace tutorial {
namespace {

constexpr size_t kHostAlignment = 4096;

#ifdef TUTORIAL_HAVE_CUDA
void CheckCuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw RuntimeError(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

// cuMemGetHandleForAddressRange lives in the driver API. Asking the runtime
// for it keeps libcuda out of the link line, so the binary builds on a
// machine that has only the toolkit's headers and libcudart.
using GetHandleFn = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType,
                                 unsigned long long);
GetHandleFn DriverGetHandleForAddressRange() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
  cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 11070,
                                                     cudaEnableDefault, &status);
#else
  cudaError_t err =
      cudaGetDriverEntryPoint("cuMemGetHandleForAddressRange", &fn, cudaEnableDefault, &status);
#endif
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess) return nullptr;
  return reinterpret_cast<GetHandleFn>(fn);
}

// dma-buf export wants whole host pages; cudaMalloc hands out 2 MiB-aligned
// blocks for large allocations, so rounding the size up stays inside them.
constexpr size_t kCudaGranularity = 2u << 20;
#endif

}  // namespace

const char* MemoryKindName(MemoryKind kind) { return kind == MemoryKind::kCuda ? "cuda" : "host"; }

bool BuiltWithCuda() {
#ifdef TUTORIAL_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int CudaDeviceCount() {
#ifdef TUTORIAL_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

std::string CudaPciAddress(int device) {
#ifdef TUTORIAL_HAVE_CUDA
  char bus_id[32] = {};
  CheckCuda(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device), "cudaDeviceGetPCIBusId");
  std::string id(bus_id);
  for (auto& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // CUDA writes an 8-digit domain ("00000000:53:00.0"); PCI tools use 4.
  if (id.size() > 12 && id.find(':') == 8) id = id.substr(4);
  return id;
#else
  (void)device;
  throw RuntimeError("this binary was built without CUDA");
#endif
}

void MakeCudaDeviceCurrent(int device) {
#ifdef TUTORIAL_HAVE_CUDA
  if (device >= 0) CheckCuda(cudaSetDevice(device), "cudaSetDevice");
#else
  (void)device;
#endif
}

Buffer Buffer::Allocate(MemoryKind kind, int cuda_device, size_t size) {
  if (size == 0) throw UsageError("buffer size must be positive");
  if (kind == MemoryKind::kHost) {
    size_t rounded = (size + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    void* data = std::aligned_alloc(kHostAlignment, rounded);
    if (data == nullptr) {
      throw RuntimeError("cannot allocate " + std::to_string(size) + " bytes of host memory");
    }
    std::memset(data, 0, rounded);
    return Buffer(kind, -1, data, size);
  }
#ifdef TUTORIAL_HAVE_CUDA
  CheckCuda(cudaSetDevice(cuda_device), "cudaSetDevice");
  size_t rounded = (size + kCudaGranularity - 1) / kCudaGranularity * kCudaGranularity;
  void* data = nullptr;
  CheckCuda(cudaMalloc(&data, rounded), "cudaMalloc");
  Buffer buffer(kind, cuda_device, data, size);
  CheckCuda(cudaMemset(data, 0, rounded), "cudaMemset");
  CheckCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return buffer;
#else
  (void)cuda_device;
  throw UsageError("--memory cuda: this binary was built without CUDA (set CUDA_HOME and rebuild)");
#endif
}

Buffer::Buffer(MemoryKind kind, int cuda_device, void* data, size_t size)
    : kind_(kind), cuda_device_(cuda_device), data_(data), size_(size) {}

Buffer::Buffer(Buffer&& other) noexcept
    : kind_(other.kind_),
      cuda_device_(other.cuda_device_),
      data_(other.data_),
      size_(other.size_),
      dmabuf_fd_(other.dmabuf_fd_) {
  other.data_ = nullptr;
  other.dmabuf_fd_ = -2;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    kind_ = other.kind_;
    cuda_device_ = other.cuda_device_;
    data_ = other.data_;
    size_ = other.size_;
    dmabuf_fd_ = other.dmabuf_fd_;
    other.data_ = nullptr;
    other.dmabuf_fd_ = -2;
  }
  return *this;
}

Buffer::~Buffer() { Release(); }

void Buffer::Release() noexcept {
  if (dmabuf_fd_ >= 0) close(dmabuf_fd_);
  dmabuf_fd_ = -2;
  if (data_ == nullptr) return;
  if (kind_ == MemoryKind::kHost) {
    std::free(data_);
  } else {
#ifdef TUTORIAL_HAVE_CUDA
    cudaFree(data_);
#endif
  }
  data_ = nullptr;
}

int Buffer::DmabufFd() const {
  if (dmabuf_fd_ != -2) return dmabuf_fd_;
  dmabuf_fd_ = -1;
#ifdef TUTORIAL_HAVE_CUDA
  if (kind_ == MemoryKind::kCuda) {
    if (auto get_handle = DriverGetHandleForAddressRange()) {
      int fd = -1;
      size_t rounded = (size_ + kCudaGranularity - 1) / kCudaGranularity * kCudaGranularity;
      if (get_handle(&fd, reinterpret_cast<CUdeviceptr>(data_), rounded,
                     CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) == CUDA_SUCCESS) {
        dmabuf_fd_ = fd;
      }
    }
  }
#endif
  return dmabuf_fd_;
}

void Buffer::CopyFromHost(size_t offset, const void* src, size_t length) {
  if (offset > size_ || length > size_ - offset) throw RuntimeError("CopyFromHost out of range");
  if (length == 0) return;  // memcpy from a null source is undefined even for 0 bytes
  if (kind_ == MemoryKind::kHost) {
    std::memcpy(static_cast<char*>(data_) + offset, src, length);
    return;
  }
#ifdef TUTORIAL_HAVE_CUDA
  CheckCuda(cudaSetDevice(cuda_device_), "cudaSetDevice");
  CheckCuda(cudaMemcpy(static_cast<char*>(data_) + offset, src, length, cudaMemcpyHostToDevice),
            "cudaMemcpy to device");
#endif
}

void Buffer::CopyToHost(size_t offset, void* dst, size_t length) const {
  if (offset > size_ || length > size_ - offset) throw RuntimeError("CopyToHost out of range");
  if (length == 0) return;
  if (kind_ == MemoryKind::kHost) {
    std::memcpy(dst, static_cast<const char*>(data_) + offset, length);
    return;
  }
#ifdef TUTORIAL_HAVE_CUDA
  CheckCuda(cudaSetDevice(cuda_device_), "cudaSetDevice");
  CheckCuda(
      cudaMemcpy(dst, static_cast<const char*>(data_) + offset, length, cudaMemcpyDeviceToHost),
      "cudaMemcpy to host");
#endif
}

}  // namespace tutorial
