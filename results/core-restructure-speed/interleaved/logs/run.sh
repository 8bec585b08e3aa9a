#!/bin/bash
# Streams at once on disjoint CPU sets of the device. Usage:
#   run.sh TAG STREAM [STREAM ...]   STREAM = label-rN:cpus[/label-rN:cpus...]
# label taskset<k>: the README's simnic command with --cpu-limited, today's
# binaries; label ab: the chapters before and after the core restructure,
# 256-byte pages then --cpu-limited, 3 runs each, the order alternating.
H=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
tag=$1; shift
{ date -u; nproc; lscpu; uname -r; } > "$OUT/machine-$tag.txt" 2>&1
one() {  # bins machine-name cpus log [flags...]
  local b=$1 name=$2 cpus=$3 log=$4; shift 4
  echo "=== $name $cpus $* $(date -u +%T)" >> "$log"
  LD_LIBRARY_PATH=$H/$b/lib taskset -c "$cpus" python3 tools/compare.py --provider simnic \
    --repeat 200 "$@" --bin-dir "$H/$b" --timeout 120 --machine "$name" >> "$log" 2>&1
  echo "=== rc=$? $(date -u +%T)" >> "$log"
}
stream() {
  for item in ${1//\// }; do
    label=${item%%:*} cpus=${item#*:}
    log=$OUT/log-$label.txt
    case $label in
      ab-r*)
        r=${label#ab-r}; order="before now"; [ $((r % 2)) = 0 ] && order="now before"
        for b in $order; do one $b "h200x2-ab-$b-r$r" "$cpus" "$log" --runs 3; done
        for b in $order; do one $b "h200x2-ab-$b-r$r" "$cpus" "$log" --runs 3 --cpu-limited; done ;;
      *) one now "h200x2-$label" "$cpus" "$log" --cpu-limited ;;
    esac
  done
}
for s in "$@"; do stream "$s" & done
wait
tar -C out/results -czf "$OUT/folders-$tag.tgz" .
tail -qn 1 "$OUT"/log-*.txt
