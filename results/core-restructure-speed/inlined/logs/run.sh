#!/bin/bash
# One round of the before/inlined comparison on the device machine, from the
# checkout's root, with the binaries carried in .devbin/ab/{before,now,lto}
# (before: the commit before the core split; lto: today's chapters with the
# hooks inlined at link time; now/lib and now/simnic: the libraries and the
# simnic provider both use). Usage: run.sh ROUND CPUS BUILD [BUILD ...]
# Each build: the README's simnic command with --runs 3 (every chapter,
# 256-byte pages), then the same with --cpu-limited, in the order given.
# CHAPTERS="11_multithread 12_pin ..." (the environment) narrows both.
set -u
round=$1 cpus=$2; shift 2
ab=$PWD/.devbin/ab
for b in "$@"; do
  [ -d "$ab/$b/lib" ] || cp -r "$ab/now/lib" "$ab/$b/lib"
  [ -d "$ab/$b/simnic" ] || cp -r "$ab/now/simnic" "$ab/$b/simnic"
done
export PYTHONUNBUFFERED=1
log=$OUT/log-r$round.txt
{ date -u; nproc; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket|NUMA node'; uname -r; } > "$OUT/machine.txt" 2>&1
for mode in "" --cpu-limited; do
  for b in "$@"; do
    echo "=== $b round $round $cpus $mode $(date -u +%T)" >> "$log"
    LD_LIBRARY_PATH=$ab/$b/lib taskset -c "$cpus" python3 tools/compare.py --provider simnic \
      --repeat 200 --runs 3 $mode --bin-dir "$ab/$b" --timeout 120 \
      --machine "h200-ab-$b-r$round" ${CHAPTERS:+--chapters $CHAPTERS} >> "$log" 2>&1
    echo "=== rc=$? $(date -u +%T)" >> "$log"
  done
done
tar -C out/results -czf "$OUT/folders-r$round.tgz" .
grep -h "^===" "$log"
