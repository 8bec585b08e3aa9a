#!/usr/bin/env bash
# Fresh simulated ladders (simnic, SIMULATED) on a machine nobody recorded:
# the README's command at several CPU counts, at 256-byte pages and with
# --cpu-limited (128-byte pages), round after round, with binaries built once
# here and carried there (a machine without Bazel).
#
#   maint/fresh_ladders.sh build BINS
#       build every chapter, simnic's provider and simnic_bench, and stage them
#       in BINS as `tools/compare.py --bin-dir` wants (BINS/<chapter>/server
#       and client, BINS/simnic/, the libraries they load in BINS/lib/, the
#       commit in BINS/COMMIT). Run it in a checkout with Bazel.
#   maint/fresh_ladders.sh run BINS MACHINE ROUND STREAM [STREAM ...]
#       on the machine, from a checkout's root: each STREAM is a list
#       label:cpus,label:cpus,... run one after the other (`taskset -c cpus`);
#       the streams run at the same time, so their CPU sets must not overlap.
#       Each item runs
#         taskset -c CPUS python3 tools/compare.py --provider simnic --repeat 200 \
#           [--cpu-limited] --bin-dir BINS --timeout 120 --machine MACHINE-LABEL-rROUND
#       into out/results/, its output in out/fresh/log-rROUND-<stream>.txt, and
#       the machine's CPUs in out/fresh/machine.txt.
#
# Example (the recording in results/h200x2-fresh/, a 32-CPU machine, three
# rounds, two streams):
#   maint/fresh_ladders.sh build .devbin/fresh
#   for r in 1 2 3; do
#     maint/fresh_ladders.sh run .devbin/fresh h200x2 $r taskset16:0-15,taskset6:0-5 \
#       taskset12:16-27,taskset8:16-23,taskset4:16-19
#   done
#   for f in out/results/h200x2-*-r[123]-simnic-*; do
#     python3 tools/compare.py --record-from "$f" --out "results/h200x2-fresh/${f##*/}" --no-docs
#   done
#   python3 maint/docs_diff.py --write   # the tables and results/h200x2-fresh/README.md
#
# With two streams, compare.py's "other processes took N% of the CPU time"
# counts the other stream, which runs on CPUs of its own; say so beside the
# recording. The costs the model uses (simnic/costs.h) are frozen: a fresh
# recording changes none of them.
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in
  -h|--help|"") usage; [ -n "${1:-}" ]; exit $? ;;
esac
cmd=$1; shift
cd "$(dirname "$0")/.."

if [ "$cmd" = build ]; then
  [ $# -eq 1 ] || { echo "fresh_ladders: usage: build BINS (--help)" >&2; exit 2; }
  mkdir -p "$1"; b=$(cd "$1" && pwd)
  bazel build //chapters/... //simnic:libsimnic-fi.so //simnic:simnic_bench
  rm -rf "${b:?}"/[0-9][0-9]_* "$b/simnic" "$b/lib"; mkdir -p "$b/simnic" "$b/lib"
  for c in $(cd chapters && ls -d [0-9][0-9]_*); do
    mkdir -p "$b/$c"
    install -m 755 "bazel-bin/chapters/$c/server" "bazel-bin/chapters/$c/client" "$b/$c/"
  done
  install -m 755 bazel-bin/simnic/libsimnic-fi.so bazel-bin/simnic/simnic_bench "$b/simnic/"
  # The libraries a bare machine may lack (libfabric among them); the C and
  # C++ runtimes stay the machine's own.
  for l in $(ldd "$b"/*/server "$b"/simnic/* | awk '/=> \//{print $3}' | sort -u |
             grep -v '/lib\(c\|m\|stdc++\|gcc_s\)\.so'); do
    cp -L "$l" "$b/lib/"
  done
  git rev-parse --short HEAD > "$b/COMMIT"
  echo "fresh_ladders: $(du -sh "$b" | cut -f1) in $b (commit $(cat "$b/COMMIT"))"
  exit 0
fi

[ "$cmd" = run ] && [ $# -ge 4 ] || { echo "fresh_ladders: usage: run BINS MACHINE ROUND STREAM... (--help)" >&2; exit 2; }
bins=$(cd "$1" && pwd) machine=$2 round=$3; shift 3
[ -x "$bins/simnic/simnic_bench" ] || { echo "fresh_ladders: $bins has no simnic/simnic_bench: run build first" >&2; exit 2; }
export LD_LIBRARY_PATH=$bins/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONUNBUFFERED=1
logs=out/fresh; mkdir -p "$logs"
{ date -u; nproc; lscpu | grep -E 'Model name|^CPU\(s\)|Socket|NUMA node|Thread'; uname -r; } \
  > "$logs/machine.txt" 2>&1
stream() {  # NAME ITEMS: the items one after the other, each plain then --cpu-limited
  local log=$logs/log-r$round-$1.txt item label cpus mode
  for item in ${2//,/ }; do
    label=${item%%:*} cpus=${item#*:}
    for mode in "" --cpu-limited; do
      echo "=== $label $cpus $mode round $round $(date -u +%T)" >> "$log"
      taskset -c "$cpus" python3 tools/compare.py --provider simnic --repeat 200 $mode \
        --bin-dir "$bins" --timeout 120 --machine "$machine-$label-r$round" >> "$log" 2>&1 &&
        rc=0 || rc=$?
      echo "=== rc=$rc $(date -u +%T)" >> "$log"
    done
  done
}
names=(A B C D E F G H)
[ $# -le ${#names[@]} ] || { echo "fresh_ladders: at most ${#names[@]} streams" >&2; exit 2; }
pids=()
for i in $(seq 0 $(($# - 1))); do
  items=${*:$((i + 1)):1}
  stream "${names[$i]}" "$items" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
grep -h "^=== rc=" "$logs"/log-r"$round"-*.txt | sort | uniq -c
echo "fresh_ladders: round $round done; folders in out/results/$machine-*-r$round-*, logs in $logs/"
if grep -q "^=== rc=[1-9]" "$logs"/log-r"$round"-*.txt; then
  echo "fresh_ladders: some runs failed (rc above): see the logs before recording" >&2; exit 1
fi
