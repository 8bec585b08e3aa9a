#!/usr/bin/env bash
# Builds libfabric 2.x from Debian's source package into a prefix laid out
# like the AWS EFA installer's /opt/amazon/efa (bin/fi_info, lib/, include/),
# with the providers a p5 uses (efa, against Debian's rdma-core headers) and
# those this machine runs (shm, tcp, rxm), plus fabtests' fi_rma_bw.
#
#   tools/build_libfabric.sh [PREFIX]      (default: out/libfabric-<version>)
#   LIBFABRIC_PREFIX=PREFIX bazel test //...
#
# The source comes from Debian's next release through a private apt
# configuration (its own sources list, lists, cache and status under
# $LIBFABRIC_BUILD_CACHE); the system's apt sources are never read or
# changed. Debian's .dsc and packaging tarball may be refused by the mirror:
# the upstream tarball (libfabric_<version>.orig.tar.xz) is all it needs, and
# when apt will not hand it over it is fetched directly and checked against
# the SHA256 in Debian's signed index.
#
# A prefix that already holds this version, built with these options, is
# kept (the stamp is PREFIX/share/libfabric-build/stamp). The configure
# summary is kept beside it (configure-summary.txt): the efa line must say
# yes, or the build fails. Needs autoconf, automake, libtool, make, a C
# compiler and libibverbs-dev (tools/setup.sh installs them).
#
# Environment:
#   LIBFABRIC_VERSION      upstream version to build (default 2.1.0)
#   LIBFABRIC_SUITE        Debian suite to take it from (default trixie)
#   LIBFABRIC_MIRROR       Debian mirror (default http://deb.debian.org/debian)
#   LIBFABRIC_BUILD_CACHE  apt state and downloaded tarball
#                          (default ${XDG_CACHE_HOME:-~/.cache}/tutorial-libfabric)
#   LIBFABRIC_CONFIGURE_EXTRA  more ./configure arguments; a --with-cuda=DIR
#                          among them is given to fabtests' configure too, so
#                          fi_rma_bw can use CUDA memory (-D cuda). For a GPU
#                          machine: "--with-cuda=$(tools/cuda_headers.sh DIR)
#                          --enable-cuda-dlopen" (libfabric and fi_rma_bw then
#                          dlopen libcudart.so and libcuda.so.1 at run time)
set -euo pipefail

if [[ ${1:-} == --help || ${1:-} == -h ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
version=${LIBFABRIC_VERSION:-2.1.0}
suite=${LIBFABRIC_SUITE:-trixie}
mirror=${LIBFABRIC_MIRROR:-http://deb.debian.org/debian}
cache=${LIBFABRIC_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tutorial-libfabric}
prefix=${1:-$repo/out/libfabric-$version}
extra=${LIBFABRIC_CONFIGURE_EXTRA:-}
jobs=$(nproc 2>/dev/null || echo 2)

die() { echo "build_libfabric: $*" >&2; exit 1; }

case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
configure_args=(--enable-only --enable-efa=yes --enable-shm=yes --enable-tcp=yes --enable-rxm=yes
                --disable-static)
# shellcheck disable=SC2206  # word splitting of the extra arguments is wanted
[[ -n $extra ]] && configure_args+=($extra)
# fabtests takes --with-cuda (not --enable-cuda-dlopen: it always dlopens).
fabtests_args=()
for arg in "${configure_args[@]}"; do
  [[ $arg == --with-cuda=* ]] && fabtests_args+=("$arg")
done
stamp_dir=$prefix/share/libfabric-build
key="libfabric $version from Debian $suite; configure ${configure_args[*]}"

if [[ -f $stamp_dir/stamp && $(cat "$stamp_dir/stamp") == "$key" && -x $prefix/bin/fi_info ]]; then
  echo "build_libfabric: $prefix already holds $key"
  grep -i 'efa' "$stamp_dir/configure-summary.txt" || true
  exit 0
fi

# --- the source -------------------------------------------------------------
mkdir -p "$cache/apt/lists/partial" "$cache/apt/archives/partial" "$cache/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" \
  >"$cache/apt/sources.list"
: >"$cache/apt/status"
apt_private=(-o "Dir::Etc::SourceList=$cache/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache=$cache/apt"
             -o "Dir::State::status=$cache/apt/status" -o Debug::NoLocking=1
             -o APT::Sandbox::User=root)
tarball=libfabric_$version.orig.tar.xz
sha_file=$cache/src/$tarball.sha256

if ! [[ -f $cache/src/$tarball && -f $sha_file ]] ||
   ! (cd "$cache/src" && sha256sum -c --status "$sha_file"); then
  command -v apt-get >/dev/null || die "cannot get libfabric $version's source: no apt-get on this machine"
  [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] ||
    die "cannot get libfabric $version's source: Debian's archive keyring is missing (package debian-archive-keyring)"
  echo "build_libfabric: reading Debian $suite's source index (private apt configuration in $cache/apt)"
  rm -f "$cache/apt/lists/"*Sources*
  # apt-get update exits 0 on an unreachable mirror: the index must be there.
  if ! apt-get "${apt_private[@]}" -q update >"$cache/apt/update.log" 2>&1 ||
     ! compgen -G "$cache/apt/lists/*_${suite}_*Sources*" >/dev/null; then
    die "cannot get libfabric $version's source: Debian $suite's index could not be read from $mirror (see $cache/apt/update.log)"
  fi
  debian_versions=$(apt-cache "${apt_private[@]}" showsrc libfabric 2>/dev/null |
                    sed -n 's/^Version: //p' | sort -u || true)
  debian_version=$(grep -E "^([0-9]+:)?${version//./\\.}-" <<<"$debian_versions" | head -1 || true)
  [[ -n $debian_version ]] ||
    die "cannot get libfabric $version's source: Debian $suite offers ${debian_versions:-no libfabric} (set LIBFABRIC_VERSION)"
  # The tarball's address and hash, from the signed index (empty download dir:
  # apt lists only files not yet there).
  uris_dir=$(mktemp -d)
  uri_line=$(cd "$uris_dir" && apt-get "${apt_private[@]}" -q source --print-uris "libfabric=$debian_version" 2>/dev/null |
             grep "' $tarball " || true)
  rmdir "$uris_dir"
  [[ -n $uri_line ]] || die "cannot get libfabric $version's source: Debian $suite lists no $tarball"
  url=$(sed "s/^'\([^']*\)'.*/\1/" <<<"$uri_line")
  sha256=$(grep -o 'SHA256:[0-9a-f]*' <<<"$uri_line" | cut -d: -f2)
  [[ -n $sha256 ]] || die "cannot get libfabric $version's source: no SHA256 for $tarball in Debian's index"
  echo "$sha256  $tarball" >"$sha_file"
  rm -f "$cache/src/$tarball"
  echo "build_libfabric: apt-get source --download-only libfabric=$debian_version"
  # The .dsc and the Debian tarball may be refused (404): only the upstream
  # tarball matters, so apt's exit status does not.
  (cd "$cache/src" && apt-get "${apt_private[@]}" -q source --download-only "libfabric=$debian_version" \
     >"$cache/src/apt-source.log" 2>&1) || true
  if ! [[ -f $cache/src/$tarball ]]; then
    echo "build_libfabric: apt did not fetch $tarball; fetching $url"
    if command -v curl >/dev/null; then
      curl -fsSL -o "$cache/src/$tarball.part" "$url" || true
    else
      python3 -c 'import sys,urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
        "$url" "$cache/src/$tarball.part" 2>/dev/null || true
    fi
    [[ -s $cache/src/$tarball.part ]] && mv "$cache/src/$tarball.part" "$cache/src/$tarball"
  fi
  [[ -f $cache/src/$tarball ]] || die "cannot get libfabric $version's source: $url could not be downloaded"
  (cd "$cache/src" && sha256sum -c --status "$sha_file") || {
    rm -f "$cache/src/$tarball"
    die "cannot get libfabric $version's source: $tarball does not match Debian's SHA256 $sha256"
  }
fi

# --- the build --------------------------------------------------------------
for tool in autoreconf libtoolize make cc; do
  command -v "$tool" >/dev/null || die "cannot build: '$tool' is missing (run tools/setup.sh)"
done
[[ -f /usr/include/infiniband/efadv.h ]] ||
  die "cannot build the efa provider: /usr/include/infiniband/efadv.h is missing (Debian's libibverbs-dev; run tools/setup.sh)"

# Replace only a prefix this script built (or an empty one).
if [[ -e $prefix ]] && [[ -n $(ls -A "$prefix" 2>/dev/null) ]]; then
  [[ -f $stamp_dir/stamp ]] || die "$prefix is not empty and was not built by this script; choose another PREFIX"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/build-libfabric.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
echo "build_libfabric: building libfabric $version in $work (log: $work/build.log)"
tar -xJf "$cache/src/$tarball" -C "$work"
src=$work/libfabric-$version
[[ -d $src ]] || die "$tarball did not unpack into libfabric-$version/"
log=$work/build.log
run() { "$@" >>"$log" 2>&1 || { tail -30 "$log" >&2; die "failed: $* (full log above)"; }; }

cd "$src"
run ./autogen.sh
rm -rf "$prefix"
mkdir -p "$prefix"
run ./configure --prefix="$prefix" "${configure_args[@]}"
# configure ends with a table of providers: keep it (it shows efa enabled).
summary=$(grep -E '^configure: (efa|shm|sm2|tcp|rxm) provider: |^\*\*\* (Built-in|DSO) providers:' "$log" || true)
# With --with-cuda, configure must have found CUDA (HAVE_CUDA 1 in config.h).
if [[ " ${configure_args[*]} " == *" --with-cuda="* ]]; then
  grep -q '^#define HAVE_CUDA 1' config.h || die "configure did not enable CUDA (config.h has no HAVE_CUDA 1)"
  summary+=$'\n'"$(grep -E '^#define (HAVE_CUDA|ENABLE_CUDA_DLOPEN|HAVE_CUDA_DMABUF) ' config.h)"
fi
grep -Eq 'Built-in providers:.*\befa\b|DSO providers:.*\befa\b' <<<"$summary" ||
  die "configure did not enable the efa provider: $(tr '\n' ' ' <<<"$summary")"
run make -j"$jobs"
run make install

# fabtests' fi_rma_bw, against the libfabric just installed.
cd "$src/fabtests"
run ./autogen.sh
# Its helper library is linked in statically, so the one binary is enough.
run ./configure --prefix="$prefix" --with-libfabric="$prefix" --disable-shared --enable-static \
  "${fabtests_args[@]}" LDFLAGS="-Wl,-rpath,$prefix/lib"
run make -j"$jobs" benchmarks/fi_rma_bw
run ./libtool --mode=install install -m 755 benchmarks/fi_rma_bw "$prefix/bin/fi_rma_bw"

mkdir -p "$stamp_dir"
echo "$summary" >"$stamp_dir/configure-summary.txt"
cp "$log" "$stamp_dir/build.log"
echo "$key" >"$stamp_dir/stamp"
"$prefix/bin/fi_info" --version >"$stamp_dir/fi_info-version.txt"
elapsed=$(($(date +%s) - start))

echo "build_libfabric: configure summary:"
cat "$stamp_dir/configure-summary.txt"
echo "build_libfabric: $("$prefix/bin/fi_info" --version | tr '\n' ' ')"
echo "build_libfabric: installed libfabric $version (efa shm tcp rxm, fi_rma_bw) in $prefix in ${elapsed}s"
echo "build_libfabric: use it with LIBFABRIC_PREFIX=$prefix"
