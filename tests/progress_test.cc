// What the progress line prints: rates as they are, never rounded to a
// whole number that misleads (a simulated 0.78 Gbps NIC is not "1 Gbps").
#include "common/progress.h"

#include <gtest/gtest.h>

namespace tutorial {
namespace {

TEST(FormatRate, KeepsThreeSignificantDigitsWithoutAnExponent) {
  EXPECT_EQ(FormatRate(0.78), "0.78");
  EXPECT_EQ(FormatRate(0.39), "0.39");
  EXPECT_EQ(FormatRate(0.001234), "0.00123");
  EXPECT_EQ(FormatRate(12.5), "12.5");
  EXPECT_EQ(FormatRate(100), "100");
  EXPECT_EQ(FormatRate(3200), "3200");
  EXPECT_EQ(FormatRate(0), "0");
}

}  // namespace
}  // namespace tutorial
