// RAII for libfabric objects: every fid is closed exactly once, in reverse
// order of creation, even when a constructor throws halfway.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <memory>
#include <string>

#include "common/errors.h"

namespace tutorial {

// Closes any libfabric object through its embedded `struct fid`.
template <typename T>
struct FidCloser {
  void operator()(T* object) const {
    if (object != nullptr) fi_close(&object->fid);
  }
};

template <typename T>
using FidPtr = std::unique_ptr<T, FidCloser<T>>;

// Owns a list returned by fi_getinfo (or one fi_dupinfo'ed entry).
struct FiInfoFree {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using FiInfoPtr = std::unique_ptr<fi_info, FiInfoFree>;

// Throws RuntimeError when `ret` is an error code (negative), in fabtests'
// form: the call, where it was made, the return code and fi_strerror
// ("fi_cq_read(): common/network.cc:412, ret=-5 (Input/output error)").
// The caller's file and line come by default, so call sites stay one line.
inline void CheckFabric(long ret, const char* call, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  if (ret < 0) {
    throw RuntimeError(std::string(call) + "(): " + file + ":" + std::to_string(line) + ", ret=" +
                       std::to_string(ret) + " (" + fi_strerror(static_cast<int>(-ret)) + ")");
  }
}

}  // namespace tutorial
