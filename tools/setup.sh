#!/usr/bin/env bash
# Installs what the tutorial needs from the distribution's packages: Debian 12,
# Ubuntu 22.04 and 24.04 (apt), Amazon Linux 2023 (dnf). Safe to run again:
# it installs only what is missing. Needs root or sudo.
#
#   bash tools/setup.sh            # install
#   bash tools/setup.sh --dry-run  # print the plan, change nothing
#
# Packages come in two kinds. A *required* one the build cannot do without:
# if the distribution's index lacks it, setup stops and says what to do. An
# *optional* one serves a tool or a test (plots, fuzzing, CI's neighbour):
# if the index lacks it, setup warns and goes on. CLI11 and nlohmann-json
# are header-only: where the distribution has no package for them, the
# copies in third_party/ (with their licenses) go to $SETUP_INCLUDE_DIR.
# The names per system, and where each was checked, are in
# tests/fixtures/packages/ (//tools:setup_test runs this script against them).
#
# Bazel, one way per system (docs/running-on-p5.md says what was tried):
#   Debian 12     bazel-bootstrap 4.2.3 and bazel-rules-java (Debian's archive)
#   Ubuntu 24.04  bazel-bootstrap 4.2.3 (universe; no bazel-rules-java there:
#                 third_party/rules_java.bzl stands in for it)
#   Ubuntu 22.04  bazel-bootstrap 3.5.1 (universe; the same stand-in)
#   AL2023        no package: Bazelisk $BAZELISK_VERSION as `bazel`, pinned to
#                 Bazel $TUTORIAL_BAZEL_VERSION (4.2.3, the version Debian's
#                 package builds this WORKSPACE with)
#
# On a machine with the AWS EFA installer (a p5 AMI), libfabric is the
# installer's, under /opt/amazon/efa: the distribution's libfabric is not
# installed over it, and the build finds it there (third_party/deps.bzl).
#
# Environment (tests, unusual machines):
#   EFA_PREFIX         the EFA installer's prefix (default /opt/amazon/efa)
#   SETUP_OS_RELEASE   the os-release file to read (default /etc/os-release)
#   SETUP_BIN_DIR      where Bazelisk goes (default /usr/local/bin)
#   SETUP_INCLUDE_DIR  where vendored headers go (default /usr/local/include)
set -euo pipefail

dry_run=0
for arg in "$@"; do
  case $arg in
    --dry-run) dry_run=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
third_party=$here/../third_party
os_release=${SETUP_OS_RELEASE:-/etc/os-release}
efa_prefix=${EFA_PREFIX:-/opt/amazon/efa}
bin_dir=${SETUP_BIN_DIR:-/usr/local/bin}
include_dir=${SETUP_INCLUDE_DIR:-/usr/local/include}
bazelisk_version=${BAZELISK_VERSION:-v1.25.0}
bazel_version=${TUTORIAL_BAZEL_VERSION:-4.2.3}

[[ -r $os_release ]] || { echo "setup: cannot read $os_release: which Linux is this?" >&2; exit 1; }
os_id=$(. "$os_release" && echo "${ID:-}")
os_version=$(. "$os_release" && echo "${VERSION_ID:-}")
os_name=$(. "$os_release" && echo "${PRETTY_NAME:-$ID $VERSION_ID}")

# The EFA installer's libfabric: include/rdma/fabric.h and lib/ or lib64/.
efa=""
if [[ -f $efa_prefix/include/rdma/fabric.h ]] &&
   compgen -G "$efa_prefix/lib*/libfabric.so*" >/dev/null; then
  efa=$efa_prefix
fi

# --- package names ----------------------------------------------------------
# required: the build of the chapters and their tests.
# optional: tools and test helpers; each says what it is for.
# headers:  "package:third_party folder", the vendored copy where it is absent.
manager=""
required=()
optional=()
headers=()
bazel_packages=()
libfabric=()
case "$os_id:$os_version" in
  debian:12* | ubuntu:22.04 | ubuntu:24.04)
    manager=apt
    required=(g++ make python3 libhwloc-dev libgtest-dev)
    optional=(
      hwloc               # lstopo / hwloc-ls, to look at the topology yourself
      iproute2            # ip netns: two hosts on one machine (tests/two_hosts_netns_test.py)
      python3-matplotlib  # plots of tools/compare.py
      python3-pip         # tools/cuda_headers.sh: CUDA headers from PyPI, no GPU needed
      clang clang-format  # libFuzzer, sanitizers, formatting
      # tools/build_libfabric.sh: libfabric 2.x from Debian's source package,
      # with the efa provider built against rdma-core's headers
      autoconf automake libtool xz-utils debian-archive-keyring libibverbs-dev
      stress-ng           # .ci/run: a CPU-bound neighbour beside the plain test pass
    )
    headers=(libcli11-dev:cli11 nlohmann-json3-dev:nlohmann_json)
    libfabric=(libfabric-dev libfabric-bin)  # fi_info, to see what libfabric finds
    case $os_version in
      12*) optional+=(libclang-rt-14-dev)       # the sanitizers' runtime of clang 14
           bazel_packages=(bazel-bootstrap bazel-rules-java) ;;
      22.04) optional+=(libclang-common-14-dev)  # there, clang 14's runtime
           bazel_packages=(bazel-bootstrap) ;;
      24.04) optional+=(libclang-rt-18-dev)
           bazel_packages=(bazel-bootstrap) ;;
    esac
    ;;
  amzn:2023*)
    manager=dnf
    required=(gcc-c++ make python3 hwloc-devel)
    optional=(
      gtest-devel         # GoogleTest: `bazel test` only (or GTEST_PREFIX)
      hwloc               # lstopo
      iproute             # ip netns
      python3-pip python3-matplotlib
      clang compiler-rt clang-tools-extra
      autoconf automake libtool xz rdma-core-devel
      stress-ng
    )
    headers=(cli11-devel:cli11 json-devel:nlohmann_json)
    libfabric=(libfabric-devel libfabric)
    ;;
  *)
    echo "setup: $os_name is not one this script knows (Debian 12, Ubuntu 22.04/24.04," \
         "Amazon Linux 2023); install by hand what tools/setup.sh lists" >&2
    exit 1
    ;;
esac

if [[ -n $efa ]]; then
  fi_info_version=$("$efa/bin/fi_info" --version 2>/dev/null | sed -n 's/^libfabric: //p' || true)
  echo "setup: libfabric ${fi_info_version:-?} from the EFA installer in $efa: the build uses it;" \
       "the distribution's libfabric is not installed"
else
  required+=("${libfabric[@]}")
  # Without the installer's libfabric, the distribution's must be 1.17 or
  # newer (the chapters are built against Debian 12's 1.17).
  if [[ $os_id:$os_version == ubuntu:22.04 ]]; then
    echo "setup: warning: Ubuntu 22.04's libfabric is 1.11, older than the 1.17 the chapters" \
         "need: build 2.x with tools/build_libfabric.sh and set LIBFABRIC_PREFIX"
  fi
fi
have_bazel=0
command -v bazel >/dev/null && have_bazel=1
if ((have_bazel == 0)); then required+=("${bazel_packages[@]}"); fi

# --- what the index has, what is installed ---------------------------------
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then sudo="sudo"
  elif ((dry_run == 0)); then echo "setup: need root or sudo" >&2; exit 1; fi
fi
available() {
  if [[ $manager == apt ]]; then
    apt-cache show "$1" >/dev/null 2>&1
  else
    dnf list --quiet "$1" >/dev/null 2>&1
  fi
}
installed() {
  if [[ $manager == apt ]]; then
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
  else
    rpm -q "$1" >/dev/null 2>&1
  fi
}

# apt-cache knows nothing (or an old list) before the first update: update
# once, before the first look-up, when anything is missing.
missing_any=0
for pair in "${required[@]}" "${optional[@]}" "${headers[@]}"; do
  installed "${pair%%:*}" || { missing_any=1; break; }
done
if [[ $manager == apt ]] && ((missing_any)); then
  if ((dry_run)); then
    echo "setup: dry run: apt-cache answers from the lists as they are (no apt-get update)"
  elif ! $sudo apt-get update -q >/dev/null; then
    echo "setup: warning: apt-get update failed (offline?): the package lists may be old"
  fi
fi

to_install=()
absent_required=()
for p in "${required[@]}"; do
  installed "$p" && continue
  if available "$p"; then to_install+=("$p"); else absent_required+=("$p"); fi
done
if ((${#absent_required[@]} > 0)); then
  hint="enable the distribution's main repositories and try again"
  [[ $os_id == ubuntu ]] && hint="enable universe (sudo add-apt-repository universe) and try again"
  [[ " ${absent_required[*]} " == *" hwloc-devel "* ]] &&
    hint="$hint; without hwloc-devel, build hwloc from source and set HWLOC_PREFIX"
  echo "setup: FAILED: required package(s) not in $os_name's repositories:" \
       "${absent_required[*]}: $hint" >&2
  exit 1
fi
optional_install=()
for p in "${optional[@]}"; do
  installed "$p" && continue
  if available "$p"; then optional_install+=("$p")
  else
    echo "setup: warning: optional package $p is not in $os_name's repositories: skipped"
    [[ $p == gtest-devel ]] &&
      echo "setup: warning: without GoogleTest the chapters build (bazel build //chapters/...);" \
           "the tests need one (GTEST_PREFIX=<a GoogleTest install>)"
  fi
done
vendor=()
for pair in "${headers[@]}"; do
  p=${pair%%:*}
  if installed "$p"; then continue; fi
  if available "$p"; then optional_install+=("$p")
  else vendor+=("${pair#*:}"); fi
done

# --- install -----------------------------------------------------------------
install_packages() {  # install_packages NAME... ; returns the manager's status
  if ((dry_run)); then echo "setup: dry run: would install: $*"; return 0; fi
  if [[ $manager == apt ]]; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@"
  else
    $sudo dnf install -y "$@"
  fi
}
if ((${#to_install[@]} > 0)); then
  echo "setup: installing on $os_name: ${to_install[*]}"
  install_packages "${to_install[@]}" ||
    { echo "setup: FAILED: $manager could not install the required packages above" >&2; exit 1; }
fi
# Optional packages one at a time: one that fails to install costs only itself.
for p in "${optional_install[@]}"; do
  install_packages "$p" >/dev/null 2>&1 ||
    echo "setup: warning: optional package $p failed to install: skipped"
done
if ((${#to_install[@]} + ${#optional_install[@]} == 0)); then
  echo "setup: every package already installed ($os_name)"
fi

# Header-only libraries the distribution lacks: our vendored copies.
for lib in "${vendor[@]}"; do
  src=$third_party/$lib/include
  echo "setup: $lib headers: no package on $os_name, copying third_party/$lib/include to $include_dir"
  if ((dry_run == 0)); then
    $sudo mkdir -p "$include_dir"
    $sudo cp -R "$src/." "$include_dir/"
  fi
done

# --- Bazel where no package has it: Bazelisk, pinned -------------------------
if ((have_bazel)); then
  echo "setup: bazel already on PATH: $(bazel --version 2>/dev/null || echo '?')"
elif ((${#bazel_packages[@]} == 0)); then
  url="https://github.com/bazelbuild/bazelisk/releases/download/$bazelisk_version/bazelisk-linux-amd64"
  [[ $(uname -m) == aarch64 ]] && url=${url%amd64}arm64
  echo "setup: no Bazel package on $os_name: installing Bazelisk $bazelisk_version as" \
       "$bin_dir/bazel (Bazel $bazel_version)"
  if ((dry_run == 0)); then
    tmp=$(mktemp)
    if ! curl -fsSL -o "$tmp" "$url"; then
      rm -f "$tmp"
      echo "setup: FAILED: cannot download Bazelisk ($url): offline? Install Bazel $bazel_version by hand" >&2
      exit 1
    fi
    $sudo install -m 755 "$tmp" "$bin_dir/bazelisk"
    rm -f "$tmp"
    # Bazelisk reads the version to fetch from USE_BAZEL_VERSION.
    printf '#!/bin/sh\nUSE_BAZEL_VERSION=${USE_BAZEL_VERSION:-%s} exec %s "$@"\n' \
      "$bazel_version" "$bin_dir/bazelisk" | $sudo tee "$bin_dir/bazel" >/dev/null
    $sudo chmod 755 "$bin_dir/bazel"
  fi
fi

if [[ -n $efa && $efa != /opt/amazon/efa ]]; then
  echo "setup: build with LIBFABRIC_PREFIX=$efa (the build looks in /opt/amazon/efa by itself)"
fi
if ((dry_run)); then echo "setup: done (dry run: nothing changed)"; else echo "setup: done"; fi
