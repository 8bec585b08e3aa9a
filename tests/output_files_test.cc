// The files the programs write (common/result_json.h): --address-file is
// replaced whole through a file of a random name, --result-json is
// appended to; neither follows a symbolic link planted at its path.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/errors.h"
#include "common/result_json.h"
#include "tests/process.h"

namespace tutorial {
namespace {

using testing::ReadFile;
using testing::TempDir;

std::vector<std::string> FilesIn(const std::string& folder) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(folder.c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
  }
  return names;
}

TEST(OutputFilesTest, AddressFileIsReplacedWholeAndLeavesNothingElse) {
  TempDir dir;
  WriteFileAtomically(dir.File("address"), "first\n");
  WriteFileAtomically(dir.File("address"), "second\n");
  EXPECT_EQ(ReadFile(dir.File("address")), "second\n");
  EXPECT_EQ(FilesIn(dir.path()), std::vector<std::string>{"address"});
  struct stat info {};
  ASSERT_EQ(stat(dir.File("address").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0644u);
}

TEST(OutputFilesTest, AddressFileReplacesALinkInsteadOfFollowingIt) {
  TempDir dir;
  std::string victim = dir.File("victim");
  WriteFileAtomically(victim, "keep\n");
  ASSERT_EQ(symlink(victim.c_str(), dir.File("address").c_str()), 0);
  // The predictable name of a temporary file, planted too.
  ASSERT_EQ(symlink(victim.c_str(), dir.File("address.new").c_str()), 0);
  WriteFileAtomically(dir.File("address"), "abcd\n");
  EXPECT_EQ(ReadFile(victim), "keep\n");
  EXPECT_EQ(ReadFile(dir.File("address")), "abcd\n");
  struct stat info {};
  ASSERT_EQ(lstat(dir.File("address").c_str(), &info), 0);
  EXPECT_TRUE(S_ISREG(info.st_mode));
}

TEST(OutputFilesTest, AddressFileInAMissingFolderSaysSo) {
  TempDir dir;
  try {
    WriteFileAtomically(dir.File("no/such/address"), "x\n");
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write " + dir.File("no/such/address")),
              std::string::npos)
        << e.what();
  }
}

TEST(OutputFilesTest, ResultJsonAppendsLines) {
  TempDir dir;
  AppendResult(dir.File("r.json"), {{"a", 1}});
  AppendResult(dir.File("r.json"), {{"a", 2}});
  EXPECT_EQ(ReadFile(dir.File("r.json")), "{\"a\":1}\n{\"a\":2}\n");
}

TEST(OutputFilesTest, ResultJsonDoesNotFollowALink) {
  TempDir dir;
  std::string victim = dir.File("victim");
  WriteFileAtomically(victim, "keep\n");
  ASSERT_EQ(symlink(victim.c_str(), dir.File("r.json").c_str()), 0);
  try {
    AppendResult(dir.File("r.json"), {{"a", 1}});
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("it is a symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ReadFile(victim), "keep\n");
}

}  // namespace
}  // namespace tutorial
