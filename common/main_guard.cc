#include "common/main_guard.h"

#include <cstdio>
#include <exception>
#include <string>

#include "common/errors.h"

namespace tutorial {
namespace {

int Report(const char* program, const char* message, int code) {
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fflush(stdout);
  std::fprintf(stderr, "%s: error: %s\n", program, line.c_str());
  return code;
}

}  // namespace

int GuardedMain(const char* program, const std::function<int()>& body) {
  // Line by line even into a file or pipe, so progress shows up as it
  // happens and stays in order with the error lines on stderr.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return body();
  } catch (const UsageError& e) {
    return Report(program, e.what(), 2);
  } catch (const std::exception& e) {
    return Report(program, e.what(), 1);
  }
}

}  // namespace tutorial
