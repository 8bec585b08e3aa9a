// The lines that name a missing piece outside the program on EFA: the other
// host's installer version (a WRITE efa refuses), and a p5 launched with
// fewer EFA interfaces than its 32 NICs. No EFA here, so the decisions are
// tested as functions; the messages are on docs/troubleshooting.md.
#include "common/efa_hints.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace tutorial {
namespace {

TEST(EfaHintsTest, ARefusedEfaWriteNamesTheInstallerVersions) {
  std::string line = WithEfaWriteHint("fi_writemsg: Operation not supported", FI_EOPNOTSUPP,
                                      /*is_write=*/true, "efa");
  EXPECT_NE(line.find("same EFA installer version on both"), std::string::npos) << line;
  EXPECT_NE(line.find("FI_EFA_USE_UNSOLICITED_WRITE_RECV=0"), std::string::npos) << line;
}

TEST(EfaHintsTest, OtherErrorsProvidersAndOperationsAreLeftAlone) {
  EXPECT_EQ(WithEfaWriteHint("x", FI_EIO, true, "efa"), "x");
  EXPECT_EQ(WithEfaWriteHint("x", FI_EOPNOTSUPP, false, "efa"), "x");
  EXPECT_EQ(WithEfaWriteHint("x", FI_EOPNOTSUPP, true, "tcp"), "x");
  EXPECT_EQ(WithEfaWriteHint("x", FI_EOPNOTSUPP, true, nullptr), "x");
}

TEST(EfaHintsTest, AP5WithFewerThan32NicsIsTold) {
  EXPECT_TRUE(P5LacksNics("efa", 16, "p5.48xlarge"));
  EXPECT_FALSE(P5LacksNics("efa", 1, "p5en.48xlarge"));  // another type: no claim
  EXPECT_FALSE(P5LacksNics("efa", 32, "p5.48xlarge"));
  EXPECT_FALSE(P5LacksNics("shm", 4, "p5.48xlarge"));
  EXPECT_FALSE(P5LacksNics("efa", 4, ""));  // not on EC2: nothing to compare with
}

TEST(EfaHintsTest, TheInstanceTypeIsTheDmiProductName) {
  char path[] = "/tmp/efa_hints_test_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  FILE* file = fdopen(fd, "w");
  std::fputs("p5.48xlarge\n", file);
  std::fclose(file);
  EXPECT_EQ(InstanceType(path), "p5.48xlarge");
  std::remove(path);
  EXPECT_EQ(InstanceType("/nonexistent/product_name"), "");
}

}  // namespace
}  // namespace tutorial
