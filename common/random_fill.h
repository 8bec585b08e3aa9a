// The data of RANDOM_FILL: a reproducible pseudo-random stream for every
// (seed, GPU, buffer), so the client can check each byte it received without
// the server ever sending the expected data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tutorial {

// A counter-based generator (SplitMix64): word i of a stream is a function of
// (stream key, i) alone, so any page can be generated or checked on its own.
class RandomStream {
 public:
  RandomStream(uint64_t seed, uint32_t gpu, uint32_t buffer);
  uint64_t Word(uint64_t index) const;
  // Writes words [first_word, first_word + length / 8). `length` must be a
  // multiple of 8.
  void Fill(uint64_t first_word, uint8_t* out, size_t length) const;

 private:
  uint64_t key_;
};

// Outcome of checking received pages.
struct VerifyReport {
  uint64_t pages_checked = 0;
  uint64_t bytes_checked = 0;
  uint64_t bad_pages = 0;
  int64_t first_bad_page = -1;  // page number j of the request, -1 when all good
};

// Checks every requested page: page j of the stream must sit at slot
// `page_indices[j]` of `received` (a host copy of one client buffer).
VerifyReport VerifyPages(const RandomStream& stream, const uint8_t* received, size_t received_size,
                         uint64_t page_size, const std::vector<uint32_t>& page_indices);

// A random sample of `count` distinct slots out of `slots`, reproducible
// from `seed` (the client's page indices).
std::vector<uint32_t> SamplePageSlots(uint64_t seed, uint64_t slots, uint64_t count);

}  // namespace tutorial
