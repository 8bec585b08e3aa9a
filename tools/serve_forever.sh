#!/usr/bin/env bash
# Runs a server and starts it again each time it ends because libfabric
# failed: exit code 3, after a provider call stuck for 10 s or a fault
# inside libfabric (harness/main_guard.h). The server does not restart
# itself: a new process is the only sure way out of a provider's broken
# state. Any other end (Ctrl-C, a usage error, --once) ends the loop with
# the server's exit code. A new server has a new address: give it
# --address-file, and clients read the file.
#
#   mkdir -p out
#   tools/serve_forever.sh bazel-bin/chapters/18_more/server --provider tcp \
#       --address-file out/address
#   bazel-bin/chapters/18_more/client --provider tcp --server "$(cat out/address)"
#
# SERVE_FOREVER_MAX_RESTARTS (default 100) bounds the restarts,
# SERVE_FOREVER_PAUSE (default 1) is the seconds between two.
# SIGINT (Ctrl-C) and SIGTERM go to the server, which stops cleanly; so
# does the loop. (A script that starts the loop in the background with &
# makes bash ignore SIGINT there: stop it with SIGTERM.)
set -u
if [ $# -eq 0 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  [ $# -eq 0 ] && exit 2 || exit 0
fi
max_restarts=${SERVE_FOREVER_MAX_RESTARTS:-100}
pause=${SERVE_FOREVER_PAUSE:-1}
provider_failed=3
restarts=0
child=0
stopping=0
forward() {
  stopping=1
  if [ "$child" -gt 0 ]; then kill -s "$1" "$child" 2>/dev/null; fi
}
trap 'forward INT' INT
trap 'forward TERM' TERM
while :; do
  "$@" &
  child=$!
  echo "serve_forever: started $1 as process $child" >&2
  # A trapped signal ends a wait early; wait again until the server is gone.
  while kill -0 "$child" 2>/dev/null; do wait "$child"; done
  wait "$child"
  code=$?
  child=0
  if [ "$code" -ne "$provider_failed" ] || [ "$stopping" -eq 1 ]; then exit "$code"; fi
  if [ "$restarts" -ge "$max_restarts" ]; then
    echo "serve_forever: error: the server failed $((restarts + 1)) times; giving up" >&2
    exit "$code"
  fi
  restarts=$((restarts + 1))
  echo "serve_forever: the server ended with code $code (libfabric failed); starting it" \
    "again in $pause s (restart $restarts of at most $max_restarts)" >&2
  sleep "$pause"
done
