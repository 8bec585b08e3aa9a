#!/bin/bash
# One round of today's core against the commit before the split, on a
# 32-CPU device machine from the checkout's root, with the binaries carried
# in .devbin/ab/{before,now} (now/lib and now/simnic: the libraries and the
# simnic provider both use). Usage: run.sh ROUND CPUS_OF_BEFORE CPUS_OF_NOW
# The two builds run at once, each on its half of the CPUs (the halves
# trade places from one round to the next): the README's simnic command with
# --runs 3 (256-byte pages), then the same at 128-byte pages, every chapter.
set -u
round=$1 cpus_before=$2 cpus_now=$3
ab=$PWD/.devbin/ab
[ -d "$ab/before/lib" ] || cp -r "$ab/now/lib" "$ab/before/lib"
[ -d "$ab/before/simnic" ] || cp -r "$ab/now/simnic" "$ab/before/simnic"
export PYTHONUNBUFFERED=1
{ date -u; nproc; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket|NUMA node'; uname -r; } > "$OUT/machine.txt" 2>&1
one() {  # build cpus page_args...
  local b=$1 cpus=$2; shift 2
  local log=$OUT/log-r$round-$b.txt
  echo "=== $b round $round $cpus $* $(date -u +%T)" >> "$log"
  LD_LIBRARY_PATH=$ab/$b/lib taskset -c "$cpus" python3 tools/compare.py --provider simnic \
    --repeat 200 --runs 3 "$@" --bin-dir "$ab/$b" --timeout 120 \
    --machine "h200-ab-$b-r$round" ${CHAPTERS:+--chapters $CHAPTERS} >> "$log" 2>&1
  echo "=== rc=$? $(date -u +%T)" >> "$log"
}
for page in 256 128; do
  one before "$cpus_before" --page-size $page &
  one now "$cpus_now" --page-size $page &
  wait
done
tar -C out/results -czf "$OUT/folders-r$round.tgz" .
grep -h "^===" "$OUT"/log-r$round-*.txt
