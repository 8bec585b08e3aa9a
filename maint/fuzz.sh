#!/usr/bin/env bash
# Fuzzes the message parsers and checks (tests/fuzz/messages_fuzzer.cc)
# with libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer, for a
# bounded time. Exits non-zero when the fuzzer finds a crash, a leak, a
# sanitizer report or a broken invariant; the input that did it is left in
# the output folder.
#
#   maint/fuzz.sh [seconds]      (default 60; FUZZ_OUT=dir to keep the work)
#
# Bazel 4's C++ rules build with gcc, which has no libFuzzer: this script
# compiles with Debian's clang directly (packages clang, libclang-rt-14-dev).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
keep=${FUZZ_OUT:+yes}
out=${FUZZ_OUT:-$(mktemp -d -t tutorial-fuzz.XXXXXX)}
mkdir -p "$out/corpus" "$out/seeds"
cxx=${CXX_FUZZ:-clang++}
flags=(-std=c++17 -I. -g -O1 -fno-omit-frame-pointer)

echo "fuzz: building with $($cxx --version | head -1)"
"$cxx" "${flags[@]}" tests/fuzz/make_seeds.cc common/messages.cc -o "$out/make_seeds"
"$cxx" "${flags[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  tests/fuzz/messages_fuzzer.cc common/messages.cc -o "$out/messages_fuzzer"
"$out/make_seeds" "$out/seeds"

echo "fuzz: running for ${seconds} s (work in $out)"
# New inputs go to corpus/; seeds are only read.
status=0
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
ASAN_OPTIONS=detect_leaks=1 \
  "$out/messages_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -print_final_stats=1 -artifact_prefix="$out/" \
  "$out/corpus" "$out/seeds" >"$out/fuzz.log" 2>&1 || status=$?

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/fuzz.log" | tail -1)
if [[ $status -eq 0 ]]; then
  echo "fuzz: passed: ${runs:-?} inputs in ${seconds} s, $(ls "$out/corpus" | wc -l) in the corpus"
  # A temporary folder goes; one named by FUZZ_OUT, or a failure's, stays.
  [[ -n $keep ]] || rm -rf "$out"
else
  echo "fuzz: FAILED (exit $status) after ${runs:-?} inputs; the log's end:"
  tail -n 40 "$out/fuzz.log"
  ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null || true
fi
exit "$status"
