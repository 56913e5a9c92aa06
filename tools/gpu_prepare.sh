#!/usr/bin/env bash
# Prepare one device-tool session (the GPU machine has torch, triton, cuda-bindings, onnx and onnxruntime (CPU) but no
# registry access, no gymnasium/mujoco/SB3): download the missing wheels for its Python 3.12 into .gpu/wheels and copy a
# trained, exported run folder into .gpu/run. .gpu/ is git-ignored; carry it: run(command="bash tools/gpu_session.sh", carry=[".gpu"]).
# Usage: tools/gpu_prepare.sh RUN_DIR    (RUN_DIR: a folder made by `ppo-trt run`, e.g. runs/Hopper-v4-ppo)
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:?usage: tools/gpu_prepare.sh RUN_DIR (a folder made by ppo-trt run)}
[ -f "$run/policy.onnx" ] || { echo "gpu_prepare: $run has no policy.onnx; run ppo-trt run (or train + export) first" >&2; exit 2; }
rm -rf .gpu.tmp && mkdir -p .gpu.tmp/wheels .gpu.tmp/run
# tensorrt-rtx-cu13-libs (95 MB) is over the 64 MiB carry limit, and TensorRT-RTX does not support H100/H200 (compute 9.0)
# the versions this checkout was tested with (those installed here), so the GPU run uses the same libraries
pins=$(python3 - <<'PY'
import importlib.metadata as md
names = 'stable-baselines3 gymnasium farama-notifications mujoco mujoco-core mujoco-studio glfw pyopengl onnxconverter-common'.split()
print(' '.join(f'{n}=={md.version(n)}' for n in names))
PY
)
pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .gpu.tmp/wheels $pins
for f in policy.zip policy.onnx export_obs.npy train.json config.json export.json obs_norm.json train_log.csv; do
  [ -f "$run/$f" ] && cp "$run/$f" .gpu.tmp/run/
done
rm -rf .gpu && mv .gpu.tmp .gpu
du -sh .gpu
