#!/usr/bin/env bash
# Hunts the 17_op_pool tcp 2x2 stall on libfabric 2.1: SLOTS loops at once,
# each a --once server and one client, as chapter_e2e_test runs them, until
# SECONDS_TOTAL pass; half the slots on CPUs 0-3, half on 4-15. Failing runs' logs
# are kept under $OUT/fail-*. The binaries: stall/ beside this script (README).
set -u
B=$(cd "$(dirname "$0")" && pwd)/stall
SLOTS=${SLOTS:-16}; SECONDS_TOTAL=${SECONDS_TOTAL:-480}
export FI_LOG_LEVEL=${FI_LOG_LEVEL:-warn}
CH=${CH:-17_op_pool}
export LD_LIBRARY_PATH=$B/lib:$B/lib2
end=$(( $(date +%s) + SECONDS_TOTAL ))
slot() {
  local s=$1 n=0 fails=0 CPUS
  if [ "$s" -le $((SLOTS / 2)) ]; then CPUS=0-3; else CPUS=4-15; fi
  while [ "$(date +%s)" -lt "$end" ]; do
    n=$((n+1)); d=$(mktemp -d /tmp/hunt.XXXXXX)
    L=(--provider tcp --memory host --gpus 2 --nics-per-gpu 2 --buffer-size 1048576)
    taskset -c $CPUS $B/$CH/server --once --repeat 5 --address-file $d/address "${L[@]}" >$d/server.out 2>&1 &
    sp=$!
    for i in $(seq 100); do [ -s $d/address ] && break; sleep 0.1; done
    timeout 90 taskset -c $CPUS $B/$CH/client --server "$(cat $d/address)" --page-size 4096 --pages 200 \
      --seed 12345 --timeout 60 "${L[@]}" --poll-threads gpu >$d/client.out 2>&1
    rc=$?
    for i in $(seq 300); do kill -0 $sp 2>/dev/null || break; sleep 0.1; done
    kill -9 $sp 2>/dev/null; wait $sp; src=$?
    if [ $rc -ne 0 ] || [ $src -ne 0 ] || grep -q "never completed\|no NIC completed" $d/server.out; then
      fails=$((fails+1)); cp -r $d $OUT/fail-$s-$n; echo "slot $s run $n: client $rc server $src"
    fi
    rm -rf $d
  done
  echo "slot $s: $n runs, $fails failed" >> $OUT/summary
}
for s in $(seq $SLOTS); do slot $s & done
wait
cat $OUT/summary | awk '{r+=$3; f+=$5} END {print "total", r, "runs,", f, "failed"}'
