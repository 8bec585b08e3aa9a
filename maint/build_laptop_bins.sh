#!/usr/bin/env bash
# Builds what maint/time_laptop_checks.py runs on a machine without Bazel (a
# GPU machine held to a laptop's cores with taskset): every chapter, the exercise variants that edit the code (11.1's
# staged failure with and without the compare-exchange; 14.1's kBatchSize 1,
# 4, 16 and 64), simnic's provider, the libraries they load that such a
# machine may lack (lib/; libstdc++ and libgcc_s apart in lib2/), and ip, ps
# and taskset as a fallback (fb/, used only where the machine has none).
#
#   maint/build_laptop_bins.sh .devbin      # a folder .gitignore ignores
set -euo pipefail
out=${1:?usage: build_laptop_bins.sh OUTDIR}
cd "$(dirname "$0")/.."
s11=chapters/11_multithread/server.cc s14=chapters/14_batch/server.cc
if [ -n "$(git status --porcelain -- "$s11" "$s14")" ]; then
  echo "build_laptop_bins: $s11 or $s14 has changes of yours; commit or stash them" >&2; exit 2
fi
trap 'git checkout -- "$s11" "$s14"' EXIT
mkdir -p "$out"; out=$(cd "$out" && pwd); rm -rf "${out:?}"/{base,v11cas,v11store,v14b*,ts,lib,lib2,fb,fbreal,fblib}
copy() { mkdir -p "$2"; install -m 755 "bazel-bin/chapters/$1/server" "bazel-bin/chapters/$1/client" "$2/"; }
bazel build //chapters/... //simnic:libsimnic-fi.so
# Every chapter: the plan's steps and the simulated ladder (compare.py --bin-dir).
for c in $(cd chapters && ls -d [0-9][0-9]_*); do copy $c "$out/base/$c"; done
copy 15_lazy "$out/ts/w/chapters/15_lazy"  # as TEST_SRCDIR/TEST_WORKSPACE for the two-hosts test
mkdir -p "$out/base/simnic"; install -m 755 bazel-bin/simnic/libsimnic-fi.so "$out/base/simnic/"
# 11.1 and 14.1 as their checks edit them (docs/11_multithread.md, docs/14_batch.md).
sed -i 's|^#include "common/server.h"|&\n#include "harness/exercise_hooks.h"|; s|^    s.warmup_posted = true;|&\n    if (tutorial::StagedFailureAfterWarmup(gpu_idx)) { ++posted_warmups_; return Fail("injected failure on GPU 1"); }|' "$s11"
bazel build //chapters/11_multithread:all && copy 11_multithread "$out/v11cas/11_multithread"
sed -i 's/      state_.compare_exchange_strong(expected, State::kWaitWarmup);/      state_ = State::kWaitWarmup;/' "$s11"
bazel build //chapters/11_multithread:all && copy 11_multithread "$out/v11store/11_multithread"
for b in 1 4 16 64; do
  sed -i "s/kBatchSize = [0-9]*;/kBatchSize = $b;/" "$s14"
  bazel build //chapters/14_batch:all && copy 14_batch "$out/v14b$b/14_batch"
  mkdir -p "$out/v14b$b/simnic"; install -m 755 bazel-bin/simnic/libsimnic-fi.so "$out/v14b$b/simnic/"
done
libs() { ldd "$@" | awk '/=> \//{print $3}' | sort -u | grep -v '/lib\(c\|m\)\.so'; }
mkdir -p "$out"/{lib,lib2,fb,fbreal,fblib}
for l in $(libs "$out"/base/*/server "$out"/base/simnic/libsimnic-fi.so "$out"/ts/w/chapters/15_lazy/server); do
  case $(basename "$l") in libstdc++*|libgcc_s*) cp -L "$l" "$out/lib2/" ;; *) cp -L "$l" "$out/lib/" ;; esac
done
for t in ip ps taskset; do
  cp -L "$(command -v $t)" "$out/fbreal/"
  printf '#!/bin/sh\nD=$(dirname "$(readlink -f "$0")")/..\nLD_LIBRARY_PATH=$D/fblib exec "$D/fbreal/%s" "$@"\n' $t >"$out/fb/$t"
  chmod +x "$out/fb/$t"
done
for l in $(libs "$out"/fbreal/*); do cp -L "$l" "$out/fblib/"; done
echo "build_laptop_bins: $(du -sh "$out" | cut -f1) in $out (commit $(git rev-parse --short HEAD))"
