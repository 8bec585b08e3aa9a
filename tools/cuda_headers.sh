#!/usr/bin/env bash
# Fetches the CUDA runtime's headers and libcudart from PyPI (NVIDIA's
# nvidia-cuda-runtime and nvidia-cuda-crt wheels, and nvidia-nvml-dev for
# nvml.h, which libfabric's --with-cuda needs) into DIR, so that the CUDA
# path compiles on a machine with no GPU and no toolkit, and prints the
# CUDA_HOME to build with:
#
#   CUDA_HOME=$(tools/cuda_headers.sh ~/.cache/cuda-headers) bazel build //...
#
# The binaries link libcudart statically and find the driver (libcuda) at run
# time; without a GPU they say so and use host memory. Safe to run again.
set -euo pipefail
if [[ ${1:-} == --help || ${1:-} == -h ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
dir=${1:?usage: cuda_headers.sh DIR}
version=${CUDA_WHEEL_VERSION:-13.0.*}
home="$dir/nvidia/cu13"
if [[ -f $home/include/cuda_runtime.h && -f $home/include/crt/host_config.h &&
      -f $home/include/nvml.h && -f $home/lib/libcudart_static.a ]]; then
  echo "$home"
  exit 0
fi
mkdir -p "$dir/wheels"
for attempt in 1 2 3; do
  if python3 -m pip download --quiet --no-deps --dest "$dir/wheels" \
      "nvidia-cuda-runtime==$version" "nvidia-cuda-crt==$version" \
      "nvidia-nvml-dev==$version" >&2; then
    break
  fi
  if ((attempt == 3)); then
    echo "cuda_headers: could not fetch the CUDA wheels from PyPI" >&2
    exit 1
  fi
  sleep 5
done
for wheel in "$dir"/wheels/*.whl; do
  python3 -m zipfile -e "$wheel" "$dir"
done
for header in cuda_runtime.h nvml.h; do
  [[ -f $home/include/$header ]] || { echo "cuda_headers: no $home/include/$header in the wheels" >&2; exit 1; }
done
echo "$home"
