// Runs the real chapter binaries from a test: start, wait with a deadline,
// capture output, and never leave a process behind.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace tutorial::testing {

// Path of a binary built by Bazel, e.g. "chapters/10_warmup/server", found
// through the test's runfiles.
std::string BinaryPath(const std::string& workspace_relative);

// A directory of the test's own, removed with the object.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path);

class Process {
 public:
  // Starts `argv` with stdout and stderr going to the given files.
  Process(const std::vector<std::string>& argv, const std::string& stdout_path,
          const std::string& stderr_path);
  ~Process();  // kills (SIGKILL) a process still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Waits up to `seconds`; returns the exit code, 128+signal when killed by
  // one, or -1 on timeout (the process keeps running).
  int Wait(double seconds);
  void Signal(int signal);
  bool running();

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  bool exited_ = false;
};

// Polls until `path` exists and is non-empty, at most `seconds`.
bool WaitForFile(const std::string& path, double seconds);

// Polls until `needle` appears in the file at `path`, at most `seconds`.
bool WaitForText(const std::string& path, const std::string& needle, double seconds);

// Runs a program to completion (bounded by `seconds`), returning its exit code
// and its output.
struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
RunResult RunToEnd(const std::vector<std::string>& argv, double seconds);

}  // namespace tutorial::testing
