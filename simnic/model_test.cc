// Where the model puts NICs and CPUs: a group's NICs on one virtual socket.
#include "simnic/model.h"

#include <gtest/gtest.h>

namespace simnic {
namespace {

TEST(NodeOfNicTest, GroupsOfFourNeverSplitAcrossSockets) {
  // 7 groups of 4: groups 0-3 on socket 0, 4-6 on socket 1.
  for (int nic = 0; nic < 28; ++nic)
    EXPECT_EQ(NodeOfNic(nic, 28, 2, 4), nic / 4 < 4 ? 0 : 1) << "NIC " << nic;
  // 3 groups of 4: groups 0 and 1 on socket 0, group 2 on socket 1, as the
  // tools' server cuts its three writers' cores (core g on socket g * 2 / 3).
  for (int nic = 0; nic < 12; ++nic) EXPECT_EQ(NodeOfNic(nic, 12, 2, 4), (nic / 4) * 2 / 3);
}

TEST(NodeOfNicTest, EightGroupsAsOnTheP5) {
  for (int nic = 0; nic < 32; ++nic) EXPECT_EQ(NodeOfNic(nic, 32, 2, 4), nic < 16 ? 0 : 1);
}

TEST(NodeOfNicTest, OneNicAGroupByDefault) {
  EXPECT_EQ(NodeOfNic(1, 4, 2), 0);
  EXPECT_EQ(NodeOfNic(2, 4, 2), 1);
  EXPECT_EQ(NodeOfNic(-1, 4, 2), -1);
}

}  // namespace
}  // namespace simnic
