// The lines that name a missing piece outside the program: CUDA memory on a
// libfabric without CUDA, the other host's EFA installer version (a WRITE
// efa refuses), a p5 launched with fewer EFA interfaces than its 32 NICs.
// No EFA or CUDA-enabled libfabric here, so the efa decisions are tested as
// functions; the messages are on docs/troubleshooting.md.
#include "common/setup_hints.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/errors.h"

namespace tutorial {
namespace {

TEST(SetupHintsTest, ARefusedEfaWriteNamesTheInstallerVersions) {
  std::string line = WithEfaWriteHint("fi_writemsg: Operation not supported", FI_EOPNOTSUPP,
                                      /*is_write=*/true, "efa");
  EXPECT_NE(line.find("same EFA installer version on both"), std::string::npos) << line;
  EXPECT_NE(line.find("FI_EFA_USE_UNSOLICITED_WRITE_RECV=0"), std::string::npos) << line;
}

TEST(SetupHintsTest, OtherErrorsProvidersAndOperationsAreLeftAlone) {
  EXPECT_EQ(WithEfaWriteHint("x", FI_EIO, true, "efa"), "x");
  EXPECT_EQ(WithEfaWriteHint("x", FI_EOPNOTSUPP, false, "efa"), "x");
  EXPECT_EQ(WithEfaWriteHint("x", FI_EOPNOTSUPP, true, "tcp"), "x");
  EXPECT_EQ(WithEfaWriteHint("x", FI_EOPNOTSUPP, true, nullptr), "x");
}

TEST(SetupHintsTest, AP5WithFewerThan32NicsIsTold) {
  EXPECT_TRUE(P5LacksNics("efa", 16, "p5.48xlarge"));
  EXPECT_FALSE(P5LacksNics("efa", 1, "p5en.48xlarge"));  // another type: no claim
  EXPECT_FALSE(P5LacksNics("efa", 32, "p5.48xlarge"));
  EXPECT_FALSE(P5LacksNics("shm", 4, "p5.48xlarge"));
  EXPECT_FALSE(P5LacksNics("efa", 4, ""));  // not on EC2: nothing to compare with
}

TEST(SetupHintsTest, AFailedWriteOfANetworkGetsTheHintOnEfaOnly) {
  RdmaOp op;
  op.type = OpType::kWrite;
  op.error = FI_EOPNOTSUPP;
  fi_info* info = fi_allocinfo();
  info->fabric_attr->prov_name = strdup("efa");
  EXPECT_NE(WithEfaHint("x", op, *info).find("FI_EFA_USE_UNSOLICITED_WRITE_RECV=0"),
            std::string::npos);
  op.type = OpType::kSend;
  EXPECT_EQ(WithEfaHint("x", op, *info), "x");
  fi_freeinfo(info);
}

// This machine's libfabric (Debian's 1.17, or CI's 2.1 build) has no CUDA
// code: CUDA memory is refused with that reason, not a missing FI_HMEM.
TEST(SetupHintsTest, CudaMemoryOnALibfabricWithoutCudaSaysSo) {
  try {
    ThrowNoGpuMemory("tcp");
  } catch (const UsageError& e) {
    std::string what = e.what();
    bool without_cuda = what.find("this libfabric was built without CUDA support") == 0;
    bool no_cudart = what.find("libfabric cannot load libcudart.so") == 0;
    bool refused = what.find("no FI_HMEM (CUDA memory) from provider tcp") == 0;
    EXPECT_TRUE(without_cuda || no_cudart || refused) << what;
    return;
  }
  FAIL() << "no exception";
}

TEST(SetupHintsTest, TheInstanceTypeIsTheDmiProductName) {
  const char* dir = std::getenv("TEST_TMPDIR");  // Bazel's, removed after the test
  std::string path = std::string(dir != nullptr ? dir : ".") + "/product_name";
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs("p5.48xlarge\n", file);
  std::fclose(file);
  EXPECT_EQ(InstanceType(path.c_str()), "p5.48xlarge");
  std::remove(path.c_str());
  EXPECT_EQ(InstanceType("/nonexistent/product_name"), "");
}

}  // namespace
}  // namespace tutorial
