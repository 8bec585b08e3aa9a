// Cleanup of shm's files touches only what it owns: a name parses exactly
// as "<pid>:<uid>:<index>" or names nothing, and only regular files of a
// dead process of our own uid are removed. The directory is a temporary
// one here; tests/shm_cleanup_test.py runs the real client in a private
// /dev/shm.
#include "common/shm_names.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>

namespace tutorial {
namespace {

TEST(ShmNamesTest, ParsesOnlyTheExactForm) {
  auto name = ParseShmName("fi_shm://123:45:6");
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(name->pid, 123);
  EXPECT_EQ(name->uid, 45u);
  EXPECT_EQ(name->index, 6u);
  EXPECT_EQ(name->file, "123:45:6");
  EXPECT_TRUE(ParseShmName("123:0:0").has_value());
  for (const char* bad : {"",
                          "fi_shm://",
                          "fi_shm://:",
                          "fi_shm://::",
                          "fi_shm://4000000:x",
                          "4000000",
                          "4000000:0",
                          "4000000:0:",
                          ":0:1",
                          "0:0:1",
                          "-1:0:1",
                          "+1:0:1",
                          " 1:0:1",
                          "1:0:1 ",
                          "1:0:1:2",
                          "1:0:x",
                          "01:0:1",
                          "1:00:1",
                          "99999999999999999999:0:1",
                          "1:4294967296:0",
                          "1:0:4294967296",
                          "1/2:0:1",
                          "../1:0:1",
                          "sem.lock",
                          "fi_shm://1:0:1/../x"}) {
    EXPECT_FALSE(ParseShmName(bad).has_value()) << bad;
  }
}

TEST(ShmNamesTest, AddressEndsAtItsFirstNul) {
  std::string text = "fi_shm://7:0:1";
  std::vector<uint8_t> address(text.begin(), text.end());
  address.push_back(0);
  address.push_back('9');
  auto name = ParseShmAddress(address);
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(name->file, "7:0:1");
  EXPECT_FALSE(ParseShmAddress({}).has_value());
}

TEST(ShmNamesTest, PrintableNameEscapesControlBytes) {
  EXPECT_EQ(PrintableName("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(PrintableName(std::string(100, 'x')).size(), 83u);
}

// A pid that was ours and is gone: a child that exited and was reaped.
pid_t DeadPid() {
  pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

class ShmCleanupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/shm_names_test.XXXXXX";
    const char* base = std::getenv("TEST_TMPDIR");
    std::string dir_pattern = base ? std::string(base) + "/shm.XXXXXX" : pattern;
    std::vector<char> buffer(dir_pattern.begin(), dir_pattern.end());
    buffer.push_back(0);
    ASSERT_NE(mkdtemp(buffer.data()), nullptr);
    dir_ = buffer.data();
  }
  void TearDown() override {
    std::string command = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
  }
  void Create(const std::string& name) {
    int fd = open((dir_ + "/" + name).c_str(), O_CREAT | O_WRONLY | O_EXCL, 0600);
    ASSERT_GE(fd, 0) << name;
    close(fd);
  }
  std::set<std::string> Left() {
    std::set<std::string> names;
    std::string command = "ls -A '" + dir_ + "'";
    FILE* listing = popen(command.c_str(), "r");
    char line[512];
    while (fgets(line, sizeof(line), listing)) {
      std::string name = line;
      if (!name.empty() && name.back() == '\n') name.pop_back();
      names.insert(name);
    }
    pclose(listing);
    return names;
  }
  std::string dir_;
};

TEST_F(ShmCleanupTest, RemovesOnlyTheDeadProcessesOwnFiles) {
  pid_t dead = DeadPid();
  std::string uid = std::to_string(getuid());
  std::string other_uid = std::to_string(getuid() + 1000);
  std::string prefix = std::to_string(dead) + ":" + uid + ":";
  Create(prefix + "0");
  Create(prefix + "1");
  // Not that process's endpoint files, or not ours: all must stay.
  std::set<std::string> others = {
      "sem.database",
      "db-segment",
      prefix + "1x",
      prefix + "01",
      std::to_string(dead) + ":" + other_uid + ":0",
      std::to_string(dead) + "0:" + uid + ":0",
      std::to_string(getpid()) + ":" + uid + ":0",
  };
  for (const auto& name : others) Create(name);
  ASSERT_EQ(symlink((dir_ + "/sem.database").c_str(), (dir_ + "/" + prefix + "2").c_str()), 0);
  others.insert(prefix + "2");

  auto peer = ParseShmName(prefix + "0");
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(RemoveFilesOfDeadProcess(*peer, dir_), 2u);
  EXPECT_EQ(Left(), others);
}

TEST_F(ShmCleanupTest, LiveOrForeignProcessesAreLeftAlone) {
  std::string uid = std::to_string(getuid());
  std::string mine = std::to_string(getpid()) + ":" + uid + ":0";
  pid_t dead = DeadPid();
  std::string foreign = std::to_string(dead) + ":" + std::to_string(getuid() + 1000) + ":0";
  Create(mine);
  Create(foreign);
  EXPECT_EQ(RemoveFilesOfDeadProcess(*ParseShmName(mine), dir_), 0u);
  EXPECT_EQ(RemoveFilesOfDeadProcess(*ParseShmName(foreign), dir_), 0u);
  EXPECT_EQ(Left(), (std::set<std::string>{mine, foreign}));
}

}  // namespace
}  // namespace tutorial
