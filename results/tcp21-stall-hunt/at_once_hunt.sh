#!/usr/bin/env bash
# Hunts the tcp stall family on libfabric 2.1 with clients at once, as
# dying_peers_test's test_clients_at_once runs them: per slot one server
# (--repeat 30) and rounds of COUNT clients started together; a client that
# fails or takes over 20 s is kept under $OUT.
set -u
B=$(cd "$(dirname "$0")" && pwd)/stall
SLOTS=${SLOTS:-8}; SECONDS_TOTAL=${SECONDS_TOTAL:-400}; COUNT=${COUNT:-8}
CHS=${CHS:-"18_more 17_op_pool"}
export LD_LIBRARY_PATH=$B/lib:$B/lib2
end=$(( $(date +%s) + SECONDS_TOTAL ))
slot() {
  local s=$1 rounds=0 clients=0 bad=0 CPUS CH
  CPUS=$(( (s - 1) * 2 ))-$(( (s - 1) * 2 + 1 ))
  CH=$(echo $CHS | cut -d' ' -f$(( (s % 2) + 1 )))
  d=$(mktemp -d /tmp/once.XXXXXX)
  L=(--provider tcp --memory host --buffer-size 1048576)
  taskset -c $CPUS $B/$CH/server --repeat 30 --address-file $d/address "${L[@]}" >$d/server.out 2>&1 &
  sp=$!
  for i in $(seq 100); do [ -s $d/address ] && break; sleep 0.1; done
  while [ "$(date +%s)" -lt "$end" ]; do
    rounds=$((rounds+1)); pids=()
    for i in $(seq $COUNT); do
      ( t0=$(date +%s.%N); timeout 150 taskset -c $CPUS $B/$CH/client --server "$(cat $d/address)" \
          --timeout 120 --page-size 4096 --pages 256 --connect-timeout 30 "${L[@]}" >$d/c$i.out 2>&1
        rc=$?; t=$(awk -v a="$(date +%s.%N)" -v b="$t0" "BEGIN{printf \"%.2f\", a-b}"); echo "$rc $t" > $d/c$i.rc ) &
      pids+=($!)
    done
    wait "${pids[@]}"
    for i in $(seq $COUNT); do
      clients=$((clients+1)); read rc t < $d/c$i.rc
      if [ "$rc" -ne 0 ] || awk -v t="$t" "BEGIN{exit !(t > 20)}"; then
        bad=$((bad+1)); mkdir -p $OUT/bad-$s-$rounds-$i; cp $d/c$i.out $OUT/bad-$s-$rounds-$i/
        echo "rc $rc, $t s" > $OUT/bad-$s-$rounds-$i/rc; echo "slot $s ($CH) round $rounds client $i: rc $rc, $t s"
      fi
    done
    kill -0 $sp 2>/dev/null || { echo "slot $s: server died"; break; }
  done
  kill $sp 2>/dev/null; wait $sp
  [ $bad -gt 0 ] && cp $d/server.out $OUT/server-$s.out
  echo "slot $s ($CH): $rounds rounds, $clients clients, $bad bad" >> $OUT/summary
  rm -rf $d
}
for s in $(seq $SLOTS); do slot $s & done
wait
cat $OUT/summary
awk '{c+=$6; b+=$8} END {print "total", c, "clients,", b, "bad"}' $OUT/summary
