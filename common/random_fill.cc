#include "common/random_fill.h"

#include <cstring>
#include <numeric>
#include <stdexcept>

namespace tutorial {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

RandomStream::RandomStream(uint64_t seed, uint32_t gpu, uint32_t buffer)
    : key_(Mix(seed ^ Mix((uint64_t{gpu} << 32 | buffer) + kGolden))) {}

uint64_t RandomStream::Word(uint64_t index) const { return Mix(key_ + (index + 1) * kGolden); }

void RandomStream::Fill(uint64_t first_word, uint8_t* out, size_t length) const {
  if (length % 8 != 0)
    throw std::invalid_argument("RandomStream::Fill: length not a multiple of 8");
  for (size_t i = 0; i < length / 8; ++i) {
    uint64_t word = Word(first_word + i);
    std::memcpy(out + 8 * i, &word, 8);
  }
}

VerifyReport VerifyPages(const RandomStream& stream, const uint8_t* received, size_t received_size,
                         uint64_t page_size, const std::vector<uint32_t>& page_indices) {
  VerifyReport report;
  uint64_t words_per_page = page_size / 8;
  for (size_t j = 0; j < page_indices.size(); ++j) {
    uint64_t offset = uint64_t{page_indices[j]} * page_size;
    bool good = offset + page_size <= received_size && page_size % 8 == 0;
    for (uint64_t w = 0; good && w < words_per_page; ++w) {
      uint64_t word;
      std::memcpy(&word, received + offset + 8 * w, 8);
      good = word == stream.Word(j * words_per_page + w);
    }
    ++report.pages_checked;
    report.bytes_checked += page_size;
    if (!good) {
      if (report.bad_pages++ == 0) report.first_bad_page = static_cast<int64_t>(j);
    }
  }
  return report;
}

std::vector<uint32_t> SamplePageSlots(uint64_t seed, uint64_t slots, uint64_t count) {
  if (count > slots) throw std::invalid_argument("SamplePageSlots: more pages than slots");
  // A partial Fisher-Yates shuffle over all slots, driven by the same generator.
  std::vector<uint32_t> all(slots);
  std::iota(all.begin(), all.end(), 0u);
  RandomStream rng(seed, 0xFFFFFFFFu, 0xFFFFFFFFu);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t j = i + rng.Word(i) % (slots - i);
    std::swap(all[i], all[j]);
  }
  all.resize(count);
  return all;
}

}  // namespace tutorial
