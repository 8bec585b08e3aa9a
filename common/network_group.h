// The NICs that belong to one GPU, used round-robin: each WRITE goes to the
// next NIC of the group, so all of them stay busy.
#pragma once

#include <cstddef>
#include <vector>

#include "common/network.h"

namespace tutorial {

class NetworkGroup {
 public:
  explicit NetworkGroup(std::vector<Network*> nets) : nets(std::move(nets)) {}

  // Index of the NIC for the next operation, cycling through the group.
  size_t GetNext() {
    size_t index = next_;
    if (++next_ == nets.size()) next_ = 0;
    return index;
  }

  // True while one NIC of the group has `max_pending` or more operations
  // on its pending queue (refused by the provider and, from chapter 15,
  // queued and not yet tried): posting more would only grow our own
  // queue, not the NIC's. The chapters pass their in-flight window.
  bool Backlogged(size_t max_pending) const {
    for (const Network* net : nets) {
      if (net->pending() >= max_pending) return true;
    }
    return false;
  }

  std::vector<Network*> nets;

 private:
  size_t next_ = 0;
};

}  // namespace tutorial
