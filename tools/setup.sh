#!/usr/bin/env bash
# Installs what the tutorial needs from the distribution's packages: Debian 12,
# Ubuntu 22.04 and 24.04 (apt), Amazon Linux 2023 (dnf). Safe to run again:
# it installs only what is missing. Needs root or sudo.
#
# On a machine with the AWS EFA installer (a p5 AMI), libfabric is the
# installer's, under /opt/amazon/efa: the distribution's libfabric is not
# installed over it, and the build finds it there (third_party/deps.bzl).
#
# Bazel comes from the distribution where it packages one (Debian's
# bazel-bootstrap 4.2, which builds offline); elsewhere, when online,
# Bazelisk $BAZELISK_VERSION is installed as `bazel`, pinned to Bazel
# $TUTORIAL_BAZEL_VERSION (docs/running-on-p5.md says which of these names and
# versions were checked).
#
# Environment (tests, unusual machines):
#   EFA_PREFIX        the EFA installer's prefix (default /opt/amazon/efa)
#   SETUP_OS_RELEASE  the os-release file to read (default /etc/os-release)
#   SETUP_BIN_DIR     where Bazelisk goes (default /usr/local/bin)
set -euo pipefail

os_release=${SETUP_OS_RELEASE:-/etc/os-release}
efa_prefix=${EFA_PREFIX:-/opt/amazon/efa}
bin_dir=${SETUP_BIN_DIR:-/usr/local/bin}
bazelisk_version=${BAZELISK_VERSION:-v1.25.0}
bazel_version=${TUTORIAL_BAZEL_VERSION:-6.5.0}

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
# Per distribution: the compiler, hwloc, GoogleTest, CLI11, nlohmann-json,
# Python, clang (libFuzzer, sanitizers), what tools/build_libfabric.sh needs,
# stress-ng (.ci/run), and libfabric unless the EFA installer's is there.
apt_common=(
  g++ make
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
  clang-format
  # tools/build_libfabric.sh: libfabric 2.x from Debian's source package,
  # with the efa provider built against rdma-core's headers
  autoconf automake libtool xz-utils debian-archive-keyring
  libibverbs-dev      # rdma-core: <infiniband/verbs.h>, <infiniband/efadv.h>
  stress-ng           # .ci/run: a CPU-bound neighbour beside the plain test pass
)
apt_libfabric=(libfabric-dev libfabric-bin)  # fi_info, to see what libfabric finds
dnf_common=(
  gcc-c++ make hwloc hwloc-devel gtest-devel cli11-devel json-devel
  python3 python3-pip python3-matplotlib iproute
  clang compiler-rt clang-tools-extra
  autoconf automake libtool xz rdma-core-devel stress-ng
)
dnf_libfabric=(libfabric-devel libfabric)

manager=""
packages=()
bazel_package=()
case "$os_id:$os_version" in
  debian:12*)
    manager=apt
    packages=("${apt_common[@]}" libclang-rt-14-dev)
    bazel_package=(bazel-bootstrap bazel-rules-java)  # rules_java: Bazel 4 loads it even for C++
    ;;
  ubuntu:22.04)
    manager=apt
    packages=("${apt_common[@]}" libclang-common-14-dev)
    ;;
  ubuntu:24.04)
    manager=apt
    packages=("${apt_common[@]}" libclang-rt-18-dev)
    ;;
  amzn:2023*)
    manager=dnf
    packages=("${dnf_common[@]}")
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
  if [[ $manager == apt ]]; then packages+=("${apt_libfabric[@]}"); else packages+=("${dnf_libfabric[@]}"); fi
fi

# Bazel: the distribution's package when it has one, else Bazelisk (below).
if ! command -v bazel >/dev/null; then
  if ((${#bazel_package[@]} == 0)) && [[ $manager == apt ]] &&
     apt-cache show bazel-bootstrap >/dev/null 2>&1; then
    bazel_package=(bazel-bootstrap)
  fi
  packages+=("${bazel_package[@]}")
fi

# --- install what is missing ------------------------------------------------
installed() {
  if [[ $manager == apt ]]; then
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
  else
    rpm -q "$1" >/dev/null 2>&1
  fi
}
missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done

sudo=""
if [[ $(id -u) -ne 0 ]] && { ((${#missing[@]} > 0)) || ! command -v bazel >/dev/null; }; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed ($os_name)"
else
  echo "setup: installing on $os_name: ${missing[*]}"
  if [[ $manager == apt ]]; then
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    $sudo dnf install -y "${missing[@]}"
  fi
fi

# --- Bazel where no package has it: Bazelisk, pinned -------------------------
if ! command -v bazel >/dev/null && ((${#bazel_package[@]} == 0)); then
  url="https://github.com/bazelbuild/bazelisk/releases/download/$bazelisk_version/bazelisk-linux-amd64"
  [[ $(uname -m) == aarch64 ]] && url=${url%amd64}arm64
  echo "setup: no Bazel package on $os_name: installing Bazelisk $bazelisk_version as" \
       "$bin_dir/bazel (Bazel $bazel_version)"
  tmp=$(mktemp)
  if ! curl -fsSL -o "$tmp" "$url"; then
    rm -f "$tmp"
    echo "setup: cannot download Bazelisk ($url): offline? Install Bazel $bazel_version by hand" >&2
    exit 1
  fi
  $sudo install -m 755 "$tmp" "$bin_dir/bazelisk"
  rm -f "$tmp"
  # Bazelisk reads the version to fetch from USE_BAZEL_VERSION.
  printf '#!/bin/sh\nUSE_BAZEL_VERSION=${USE_BAZEL_VERSION:-%s} exec %s "$@"\n' \
    "$bazel_version" "$bin_dir/bazelisk" | $sudo tee "$bin_dir/bazel" >/dev/null
  $sudo chmod 755 "$bin_dir/bazel"
fi

if [[ -n $efa && $efa != /opt/amazon/efa ]]; then
  echo "setup: build with LIBFABRIC_PREFIX=$efa (the build looks in /opt/amazon/efa by itself)"
fi
echo "setup: done"
