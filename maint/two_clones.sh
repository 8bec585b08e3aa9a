#!/usr/bin/env bash
# Two clones of this checkout run `bazel test` at the same time, as two
# learners' checkouts on one machine would: tests write only inside their
# checkout or a temp dir they remove, so neither may disturb the other.
#
#   maint/two_clones.sh                          # bazel test //... in both
#   maint/two_clones.sh --targets //docs/...     # a smaller pattern (or several)
#
# Makes a temp dir (mktemp -d), clones the checkout's HEAD into it twice
# (commit what you want tested: the clones hold no uncommitted change), and
# runs in both at once, each with its own output base under the temp dir,
# the test command of .ci/run's plain pass (its --flaky_test_attempts) plus
# --nocache_test_results, so that both clones really run every test even
# where the shared disk cache of user.bazelrc (copied into each clone when
# this checkout has one) holds their results. It waits for both, prints
# each one's summary line and exit status (and the end of its log when it
# failed), says what the runs left in /tmp and /dev/shm (maint/leftovers.py;
# on a shared machine other users' and clones' files show too), and removes
# the temp dir, its Bazel servers stopped, on any exit. Exit 0 when both
# passed. The whole suite keeps both cores of a 2-core machine busy for
# longer than CI's plain pass (.ci/run prints how long that took): run
# nothing else beside it.
set -uo pipefail
# One function, read whole before it runs: editing this file during a run
# (which takes long) cannot change that run.
main() {
  usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
  targets=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      --targets)
        shift
        while [[ $# -gt 0 && $1 != --* ]]; do targets+=("$1"); shift; done
        [[ ${#targets[@]} -gt 0 ]] || { echo "two_clones: --targets needs a pattern" >&2; exit 2; } ;;
      -h|--help) usage; exit 0 ;;
      *) echo "two_clones: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
  done
  [[ ${#targets[@]} -gt 0 ]] || targets=(//...)

  root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel) || exit 2
  # .ci/run's plain pass: a chapter's end-to-end test and the attack suite
  # get a second attempt (.ci/run says why).
  retry=(--flaky_test_attempts=//tests:[0-9][0-9]_[a-z_]*_e2e_test,//tests:attack_test@2)

  tmp=$(mktemp -d "${TMPDIR:-/tmp}/two-clones.XXXXXX") || exit 2
  pids=()
  cleanup() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for name in a b; do
      if [[ -d $tmp/$name ]]; then
        (cd "$tmp/$name" && bazel --output_base="$tmp/base-$name" shutdown >/dev/null 2>&1)
      fi
    done
    chmod -R u+w "$tmp" 2>/dev/null  # Bazel's output base holds read-only files
    rm -rf "$tmp"
  }
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  before="$tmp/shared-before.txt"
  python3 "$root/maint/leftovers.py" snapshot "$before"
  for name in a b; do
    git clone --quiet "$root" "$tmp/$name" || exit 2
    [[ -f $root/user.bazelrc ]] && cp "$root/user.bazelrc" "$tmp/$name/"
  done
  echo "two_clones: $(git -C "$root" log -1 --format='%h %s') cloned twice into $tmp;" \
    "bazel test ${targets[*]} in both at once"
  start=$(date +%s)
  for name in a b; do
    (cd "$tmp/$name" && exec bazel --output_base="$tmp/base-$name" test "${retry[@]}" \
      --nocache_test_results "${targets[@]}") >"$tmp/$name.log" 2>&1 &
    pids+=($!)
  done
  status=()
  for i in 0 1; do
    wait "${pids[$i]}"
    status+=($?)
  done
  pids=()
  echo "two_clones: both ended after $(($(date +%s) - start)) s"
  failed=0
  for i in 0 1; do
    name=$([[ $i == 0 ]] && echo a || echo b)
    summary=$(grep -E '^Executed [0-9]+ out of' "$tmp/$name.log" | tail -n 1)
    [[ -n $summary ]] ||
      summary=$(grep -E '^(ERROR: Build did NOT|INFO: Build completed)' "$tmp/$name.log" | tail -n 1)
    echo "two_clones: clone $name: exit status ${status[$i]}: ${summary:-no summary line}"
    if [[ ${status[$i]} -ne 0 ]]; then
      failed=1
      echo "two_clones: the end of clone $name's log:"
      tail -n 30 "$tmp/$name.log" | sed 's/^/    /'
    fi
  done
  python3 "$root/maint/leftovers.py" check "$before" ||
    echo "two_clones: the entries above are new in /tmp or /dev/shm (tests, or other users)"
  exit $failed
}
main "$@"
