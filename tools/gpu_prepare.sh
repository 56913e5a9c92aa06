#!/usr/bin/env bash
# The GPU kit's first half, on the CPU box (which reaches PyPI): the GPU machine has python3.12 with torch, triton,
# cuda-bindings, onnx and onnxruntime (CPU) but no registry access and no gymnasium, mujoco, SB3 or msgspec. This puts
# the wheels named in tools/gpu_carry.txt, for CPython 3.12, in .gpu/wheels (the versions of the project's venv, so the
# GPU run uses the libraries this checkout was tested with) and a trained, exported run folder in .gpu/run, and checks
# that the working tree and .gpu together stay under what the device tool carries. .gpu/ is git-ignored: carry it, then
# rehearse (tools/gpu_rehearse.sh) and run the session as the head of tools/gpu_session.sh plans it:
#   run(command="bash tools/gpu_session.sh quick", carry=[".gpu"], timeout_s=420)
# Usage: tools/gpu_prepare.sh [RUN_DIR]
#   RUN_DIR: a folder made by `ppo-trt run` (or train + export). Without it, a short Hopper-v4 run is trained and
#   exported into runs/gpu-kit-Hopper-v4 (kept: a second prepare reuses it). Uses the project's venv (.venv, or
#   PPO_TRT_PY), which must import ppo_trt, stable_baselines3, gymnasium and mujoco.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PPO_TRT_PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "gpu_prepare: no $PY: make the project's venv first (python3 -m venv .venv && " \
                       ".venv/bin/pip install -e '.[dev]'), or set PPO_TRT_PY" >&2; exit 2; }
export MUJOCO_GL=disable PYTHONWARNINGS=ignore MPLBACKEND=Agg
"$PY" -c "import ppo_trt.cli, stable_baselines3, gymnasium, mujoco, msgspec" || {
  echo "gpu_prepare: $PY cannot import the project and its training stack (above): pip install -e '.[dev]' there" >&2
  exit 2; }
cli() { "$PY" -c "import sys; from ppo_trt.cli import main; sys.argv[0] = 'ppo-trt'; sys.exit(main())" "$@"; }

run=${1:-runs/gpu-kit-Hopper-v4}
if [ $# -eq 0 ] && [ ! -f "$run/policy.onnx" ]; then
  echo "gpu_prepare: no RUN_DIR given: training and exporting a short Hopper-v4 run into $run"
  cli train --run-dir "$run" --env-id Hopper-v4 --preset smoke --timesteps 4096 --eval-freq 2048 --eval-episodes 2
  cli export --run-dir "$run"
fi
[ -f "$run/policy.onnx" ] && [ -f "$run/export_obs.npy" ] || {
  echo "gpu_prepare: $run has no policy.onnx / export_obs.npy; run ppo-trt run (or train + export) first" >&2; exit 2; }

rm -rf .gpu.tmp && mkdir -p .gpu.tmp/wheels .gpu.tmp/run
pins=$("$PY" tools/gpu_quick.py pins tools/gpu_carry.txt) || exit 2  # what is carried and what is not: that file
echo "gpu_prepare: wheels for CPython 3.12: $pins"
plats=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 any; do plats+=(--platform "$p"); done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plats[@]}" \
  -d .gpu.tmp/wheels $pins 2>&1 | sed '/is ignored: it is neither a file nor a directory/d'  # this box's pip.conf
cp -r "$run"/. .gpu.tmp/run/
rm -rf .gpu.tmp/run/checkpoints/*.zip .gpu.tmp/run/*.engine .gpu.tmp/run/.ppo-trt.lock .gpu.tmp/run/.ppo-trt.holder.json
rm -rf .gpu && mv .gpu.tmp .gpu
ls -l .gpu/wheels
"$PY" tools/gpu_quick.py carried || { echo "gpu_prepare: over the 64 MiB the device tool carries" >&2; exit 1; }
