#!/usr/bin/env bash
# Installs what the tutorial needs from Debian's packages. Safe to run again:
# it installs only what is missing. Needs root or sudo.
set -euo pipefail

packages=(
  bazel-bootstrap     # Bazel 4.2, works offline with the WORKSPACE's local stand-ins
  bazel-rules-java    # rules_java, which Bazel 4 loads even for C++
  g++
  libfabric-dev       # libfabric 1.17: providers shm, tcp, efa
  libfabric-bin       # fi_info, to see what libfabric finds
  libhwloc-dev        # topology: which NICs and cores belong to which GPU
  hwloc               # lstopo / hwloc-ls, to look at it yourself
  iproute2            # ip netns: two hosts on one machine (tests/two_hosts_netns_test.py)
  libgtest-dev        # GoogleTest
  libcli11-dev        # command-line parsing
  nlohmann-json3-dev  # result lines in JSON
  python3
  python3-matplotlib  # plots of tools/compare
  python3-pip         # tools/cuda_headers.sh: CUDA headers from PyPI, no GPU needed
  clang               # libFuzzer and sanitizers
  libclang-rt-14-dev
  clang-format
  # tools/build_libfabric.sh: libfabric 2.x from Debian's source package,
  # with the efa provider built against rdma-core's headers
  autoconf
  automake
  libtool
  make
  xz-utils
  debian-archive-keyring
  libibverbs-dev      # rdma-core: <infiniband/verbs.h>, <infiniband/efadv.h>
  stress-ng           # .ci/run: a CPU-bound neighbour beside the plain test pass
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
