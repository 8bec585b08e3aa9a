#!/bin/bash
# Experiment: --cpu-limited at --repeat 1000 on 4 and 8 CPUs, three streams at once.
H=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$H/bins/lib PYTHONUNBUFFERED=1
mkdir -p "$OUT"
stream() {
  local r=$1 base=$2 log=$OUT/log-long-r$1.txt
  for n in 4 8; do
    cpus=$base-$((base + n - 1))
    echo "=== $n CPUs ($cpus) round $r $(date -u +%T)" >> "$log"
    taskset -c "$cpus" python3 tools/compare.py --provider simnic --repeat 1000 --cpu-limited \
      --bin-dir "$H/bins" --timeout 120 --machine "h200x2-long-taskset$n-r$r" >> "$log" 2>&1
    echo "=== rc=$? $(date -u +%T)" >> "$log"
  done
}
stream 1 0 & stream 2 8 & stream 3 16 & wait
tar -C out/results -czf "$OUT/long.tgz" .
grep -h "rc=" "$OUT"/log-long-*.txt
