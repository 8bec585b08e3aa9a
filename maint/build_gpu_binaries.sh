#!/usr/bin/env bash
# Builds every chapter against a CUDA toolkit and a CUDA-capable libfabric,
# in a Bazel output base of its own (the plain build stays as it is), and
# copies the stripped binaries to OUTDIR/<chapter>/{server,client}: what a GPU
# machine without Bazel runs (maint/gpu_bench.py --bin-dir OUTDIR).
#
#   CUDA_HOME=/usr/local/cuda LIBFABRIC_PREFIX=$HOME/libfabric-cuda \
#     maint/build_gpu_binaries.sh /tmp/gpu-bin
set -euo pipefail
out=${1:?usage: build_gpu_binaries.sh OUTDIR}
: "${CUDA_HOME:?set CUDA_HOME to a CUDA toolkit (headers + libcudart)}"
: "${LIBFABRIC_PREFIX:?set LIBFABRIC_PREFIX to a CUDA-capable libfabric}"
cd "$(dirname "$0")/.."
base=${GPU_OUTPUT_BASE:-$HOME/.cache/bazel-gpu}
bazel --output_base="$base" build --symlink_prefix=/ //chapters/... //maint/probes:cuda_copy_probe
bin=$(bazel --output_base="$base" info bazel-bin 2>/dev/null)
for dir in chapters/*/; do
  chapter=$(basename "$dir")
  mkdir -p "$out/$chapter"
  for program in server client; do
    install -m 755 "$bin/chapters/$chapter/$program" "$out/$chapter/$program"
    strip "$out/$chapter/$program"
  done
done
mkdir -p "$out/probes"
install -m 755 "$bin/maint/probes/cuda_copy_probe" "$out/probes/cuda_copy_probe"
strip "$out/probes/cuda_copy_probe"
echo "build_gpu_binaries: $(ls -d "$out"/[0-9]* | wc -l) chapters and probes/ in $out"
