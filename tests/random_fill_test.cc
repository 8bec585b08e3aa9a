// Reproducible data and its verification: the client's only proof that the
// bytes it holds are the bytes the server meant to write.
#include "common/random_fill.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

namespace tutorial {
namespace {

TEST(RandomFillTest, StreamsAreReproducibleAndDistinct) {
  RandomStream a(7, 0, 0), a_again(7, 0, 0), other_gpu(7, 1, 0), other_buf(7, 0, 1),
      other_seed(8, 0, 0);
  for (uint64_t i = 0; i < 100; ++i) EXPECT_EQ(a.Word(i), a_again.Word(i));
  EXPECT_NE(a.Word(0), other_gpu.Word(0));
  EXPECT_NE(a.Word(0), other_buf.Word(0));
  EXPECT_NE(a.Word(0), other_seed.Word(0));
  EXPECT_NE(a.Word(0), a.Word(1));
}

TEST(RandomFillTest, FillMatchesWords) {
  RandomStream s(99, 3, 1);
  std::vector<uint8_t> bytes(64);
  s.Fill(10, bytes.data(), bytes.size());
  for (size_t i = 0; i < 8; ++i) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + 8 * i, 8);
    EXPECT_EQ(word, s.Word(10 + i));
  }
  EXPECT_THROW(s.Fill(0, bytes.data(), 12), std::invalid_argument);
}

// Builds what a client buffer looks like after a correct transfer.
std::vector<uint8_t> Delivered(const RandomStream& s, uint64_t page_size, size_t slots,
                               const std::vector<uint32_t>& indices) {
  std::vector<uint8_t> buffer(page_size * slots, 0);
  for (size_t j = 0; j < indices.size(); ++j) {
    s.Fill(j * page_size / 8, buffer.data() + indices[j] * page_size, page_size);
  }
  return buffer;
}

TEST(RandomFillTest, VerifyAcceptsCorrectPages) {
  RandomStream s(5, 0, 1);
  std::vector<uint32_t> indices = SamplePageSlots(5, 64, 20);
  auto buffer = Delivered(s, 256, 64, indices);
  VerifyReport r = VerifyPages(s, buffer.data(), buffer.size(), 256, indices);
  EXPECT_EQ(r.pages_checked, 20u);
  EXPECT_EQ(r.bytes_checked, 20u * 256);
  EXPECT_EQ(r.bad_pages, 0u);
  EXPECT_EQ(r.first_bad_page, -1);
}

TEST(RandomFillTest, VerifyFindsOneFlippedBit) {
  RandomStream s(5, 0, 1);
  std::vector<uint32_t> indices = SamplePageSlots(5, 64, 20);
  auto buffer = Delivered(s, 256, 64, indices);
  buffer[indices[7] * 256 + 255] ^= 0x01;
  VerifyReport r = VerifyPages(s, buffer.data(), buffer.size(), 256, indices);
  EXPECT_EQ(r.bad_pages, 1u);
  EXPECT_EQ(r.first_bad_page, 7);
}

TEST(RandomFillTest, VerifyFindsMissingAndMisplacedPages) {
  RandomStream s(5, 0, 1);
  std::vector<uint32_t> indices = {0, 1, 2, 3};
  auto buffer = Delivered(s, 64, 8, indices);
  std::swap_ranges(buffer.begin(), buffer.begin() + 64, buffer.begin() + 64);  // pages 0 and 1 swapped
  std::fill(buffer.begin() + 3 * 64, buffer.begin() + 4 * 64, 0);            // page 3 never arrived
  VerifyReport r = VerifyPages(s, buffer.data(), buffer.size(), 64, indices);
  EXPECT_EQ(r.bad_pages, 3u);
  EXPECT_EQ(r.first_bad_page, 0);
}

TEST(RandomFillTest, VerifyTreatsPagesOutsideTheBufferAsBad) {
  RandomStream s(1, 0, 0);
  std::vector<uint8_t> buffer(128, 0);
  VerifyReport r = VerifyPages(s, buffer.data(), buffer.size(), 64, {5});
  EXPECT_EQ(r.bad_pages, 1u);
}

TEST(RandomFillTest, SampleIsDistinctInRangeAndReproducible) {
  std::vector<uint32_t> a = SamplePageSlots(42, 1000, 1000);
  std::set<uint32_t> unique(a.begin(), a.end());
  EXPECT_EQ(unique.size(), 1000u);
  EXPECT_EQ(*unique.rbegin(), 999u);
  EXPECT_EQ(SamplePageSlots(42, 5000, 300), SamplePageSlots(42, 5000, 300));
  EXPECT_NE(SamplePageSlots(42, 5000, 300), SamplePageSlots(43, 5000, 300));
  EXPECT_THROW(SamplePageSlots(1, 10, 11), std::invalid_argument);
}

}  // namespace
}  // namespace tutorial
