#!/usr/bin/env bash
# Everything that needs the GPU, in one device-tool call of at most 10 minutes (prepare with tools/gpu_prepare.sh):
#   run(command="bash tools/gpu_session.sh", carry=[".gpu"], timeout_s=600)
# Writes to $OUT (at most 8 files come back): doctor.txt, bench.txt, bench.json, env_bench.txt, env_bench.json, fast.txt, pytest_gpu.txt.
# Each step has its own time limit so one slow step cannot take the others' records with it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ppo_trt_gpu_out}; mkdir -p "$OUT"
export PYTHONWARNINGS=ignore MPLBACKEND=Agg MUJOCO_GL=egl
python3 -m pip install -q --no-index --no-deps .gpu/wheels/*.whl > "$OUT/doctor.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . >> "$OUT/doctor.txt" 2>&1
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"; ppo-trt doctor; } >> "$OUT/doctor.txt" 2>&1
rm -rf /tmp/gpu_run && cp -r .gpu/run /tmp/gpu_run
timeout 240 ppo-trt bench --run-dir /tmp/gpu_run --backends ort,native-c,torch-cuda,torch-cuda-graph,torch-compile,ort-cuda,ort-trt,trt,trt-rtx,triton,triton-tf32 \
  --batches 1,16,256,4096,65536,262144,1048576 --iters 5000 --closed-loop-steps 2000 > "$OUT/bench.txt" 2>&1
cp /tmp/gpu_run/bench.json "$OUT/bench.json" 2>/dev/null
timeout 150 ppo-trt env-bench --device cuda --compile --num-envs 1024,65536,1048576,16777216 --gym-max-envs 1024 --run-dir /tmp/gpu_run > "$OUT/env_bench.txt" 2>&1
cp /tmp/gpu_run/env_bench_CartPole-v1.json "$OUT/env_bench.json" 2>/dev/null
{ for flags in "" "--cudagraphs" "--compile"; do
    echo "== ppo-trt train --fast --env-id CartPole-v1 --device cuda $flags"; rm -rf /tmp/gpu_cp
    /usr/bin/time -f 'wall %e s' timeout 60 ppo-trt train --fast --env-id CartPole-v1 --device cuda $flags --run-dir /tmp/gpu_cp
    python3 -c "import json; r = json.load(open('/tmp/gpu_cp/train.json')); print({k: r.get(k) for k in ('solved', 'final_eval_mean', 'solved_at_timesteps', 'solved_at_wall_s', 'wall_s', 'steps_per_s')})"
  done; } > "$OUT/fast.txt" 2>&1
PPO_TRT_RUN_DIR=/tmp/gpu_run timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > "$OUT/pytest_gpu.txt" 2>&1
tail -n 3 "$OUT"/*.txt
