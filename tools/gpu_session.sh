#!/usr/bin/env bash
# The GPU kit's second half: everything that needs the GPU, in stages that each end well inside the device tool's
# 10-minute command limit and each bring back their own files. Prepare first, on the CPU box: tools/gpu_prepare.sh.
# Run the stages back to back while the machine is warm; each installs what it needs when the machine is fresh,
# so any stage also runs alone:
#   run(command="bash tools/gpu_session.sh smoke", carry=[".gpu"], timeout_s=600)  ~1-2 min: nvidia-smi, Python,
#        torch, triton, the offline install (what the machine has, what was done), doctor, import and CLI checks
#        -> $OUT: kit_smoke.txt doctor.txt
#   run(command="bash tools/gpu_session.sh bench", carry=[".gpu"], timeout_s=600)  <= 8 min: ppo-trt bench of every
#        backend, batches up to 1 048 576          -> kit_bench.txt bench.txt bench.json (saved after each backend)
#   run(command="bash tools/gpu_session.sh envs", carry=[".gpu"], timeout_s=600)   <= 8 min: env-bench CartPole on
#        CUDA, three levels + the Triton kernel    -> kit_envs.txt env_bench.txt env_bench.json (saved after each point)
#   run(command="bash tools/gpu_session.sh ppo", carry=[".gpu"], timeout_s=600)    <= 8 min: fast PPO CartPole eager,
#        --cudagraphs, --compile; pytest -m gpu    -> kit_ppo.txt fast.txt fast_{eager,cudagraphs,compile}.json
#                                                     pytest_gpu.txt
# `all` runs the four in a row (only where no command limit applies; 14 files, of which the device tool brings 8).
# Every stage writes kit_<stage>.txt: the install log and each step's limit, wall time (bash's `time`) and exit status
# (124: killed at its limit). A stage stops its steps at KIT_STAGE_S seconds (default 540), whatever their limits.
# Where torch sees no CUDA GPU (the CPU box), each GPU step says why it skips; bench and envs then run a short CPU
# check of the same commands instead (GPU backends record their skip reasons), so the kit can be tried here.
# Environment: PPO_TRT_PY (the Python to use; default python3), KIT_INSTALL=auto|venv|target|none (auto: into the
# Python's own environment when it is writable and has setuptools, else pip install --target + PYTHONPATH; none: the
# Python already has the project, e.g. the CPU box's .venv), KIT_STAGE_S, KIT_DIR (default /tmp/ppo_trt_kit), OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/ppo_trt_gpu_out}; mkdir -p "$OUT"
PY=${PPO_TRT_PY:-python3}
KIT=${KIT_DIR:-/tmp/ppo_trt_kit}; mkdir -p "$KIT/bin"  # kept between calls while the machine stays warm
MUJOCO_GL_WAS=${MUJOCO_GL-<unset>}
# nothing renders on the GPU machine: `disable` never loads a GL library (egl without its loaders fails inside
# PyOpenGL with an AttributeError that mujoco does not catch, and `import mujoco` takes bench down with it)
export MUJOCO_GL=disable PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore MPLBACKEND=Agg PPO_TRT_CACHE=$KIT/cache
BENCH_BACKENDS=ort,native-c,torch-cuda,torch-cuda-graph,torch-compile,ort-cuda,ort-trt,trt,trt-rtx,triton,triton-tf32
command -v timeout > /dev/null || timeout() { while [[ $1 == -* ]]; do shift 2; done; shift; "$@"; }  # no coreutils

log() { echo "[kit $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }

step() {  # step NAME LIMIT_S FILE CMD...: CMD under `timeout`, output to FILE, limit cut to what the stage has left
  local name=$1 limit=$2 file=$3; shift 3
  local left=$(( DEADLINE - SECONDS - 5 ))
  (( limit > left )) && limit=$left
  if (( limit < 5 )); then
    log "$name: not run: the stage's ${STAGE_S} s are spent"
    echo "== $name: not run: the stage's time is spent" >> "$file"
    return 124
  fi
  echo "== $name (limit ${limit} s): $*" >> "$file"
  local t0=$SECONDS rc TIMEFORMAT="== $name: wall %R s"
  { time timeout -k 10 "$limit" "$@" >> "$file" 2>&1; } 2>> "$file"; rc=$?
  log "$name: exit $rc$( ((rc == 124 || rc == 137)) && echo ' (killed at its limit)') after $(( SECONDS - t0 )) s"
  return $rc
}

gpu_check() {  # sets GPU_WHY to '' when torch sees a CUDA GPU, else to the reason
  GPU_WHY=$("$PY" -c "
import torch
if not torch.cuda.is_available(): raise SystemExit('torch ' + torch.__version__ + ' sees no CUDA GPU')
print('GPU ' + torch.cuda.get_device_name())" 2>&1 | tail -n 1)
  if [[ $GPU_WHY == GPU\ * ]]; then log "$GPU_WHY"; GPU_WHY=''; else log "no GPU: $GPU_WHY"; fi
}

imports_ok() {  # SB3 needs torch: checked where torch imports
  "$PY" -c "
import importlib.util, ppo_trt.cli, ppo_trt.measure.bench, msgspec, gymnasium, mujoco
if importlib.util.find_spec('torch'): import stable_baselines3" >> "$LOG" 2>&1
}

kit_install() {  # the wheels of .gpu/wheels and this checkout, offline; logs what the machine has and what it did
  local wheels=(.gpu/wheels/*.whl)
  if [ "${KIT_INSTALL:-auto}" = none ]; then  # the Python already has the project (the CPU box's own venv)
    KIT_MODE=none; imports_ok || { log "install: KIT_INSTALL=none, but the project does not import (above)"; return 1; }
  fi
  [ "${KIT_MODE:-}" = none ] || [ -e "${wheels[0]}" ] || {
    log "no wheels in .gpu/wheels: run tools/gpu_prepare.sh on the CPU box, carry .gpu"; return 1; }
  local key; key=$(ls -l "${wheels[@]}" setup.py settings.ini 2> /dev/null | md5sum | cut -c1-12)
  if [ -f "$KIT/install-$key.env" ]; then
    . "$KIT/install-$key.env"
    if imports_ok; then log "install: reused this machine's earlier install ($KIT_MODE)"; return 0; fi
    log "install: the earlier install no longer imports; installing again"
  fi
  log "install: what is there (MUJOCO_GL was $MUJOCO_GL_WAS, now $MUJOCO_GL; kit python: $(command -v "$PY"))"
  "$PY" - >> "$LOG" 2>&1 <<'PY'
import importlib.metadata as md, os, shutil, sys
print('python', sys.version.split()[0], sys.executable, '| prefix', sys.prefix, '| venv', sys.prefix != sys.base_prefix,
      '| prefix writable', os.access(sys.prefix, os.W_OK))
for d in ('pip', 'setuptools', 'wheel', 'numpy', 'torch', 'triton', 'onnx', 'onnxruntime', 'onnxruntime-gpu',
          'filelock', 'rich', 'pytest', 'msgspec', 'gymnasium', 'mujoco', 'stable-baselines3', 'ppo_trt'):
    try: v = md.version(d)
    except md.PackageNotFoundError: v = 'missing'
    print(f'  {d} {v}')
print('on PATH: ppo-trt', shutil.which('ppo-trt'), '| nvidia-smi', shutil.which('nvidia-smi'), '| timeout',
      shutil.which('timeout'), '| /usr/bin/time', os.path.exists('/usr/bin/time'))
PY
  KIT_MODE=${KIT_INSTALL:-auto}
  if [ "$KIT_MODE" = none ]; then log "install: none (KIT_INSTALL=none): $PY as it is"
  elif [ "$KIT_MODE" = auto ]; then
    if "$PY" -c "import os, sys, setuptools; assert os.access(sys.prefix, os.W_OK)" 2> /dev/null; then KIT_MODE=venv
    else KIT_MODE=target; log "install: $PY's environment is not writable or has no setuptools: pip install --target"
    fi
  fi
  local pip=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check)
  if [ "$KIT_MODE" = venv ]; then
    if "${pip[@]}" "${wheels[@]}" >> "$LOG" 2>&1 && "${pip[@]}" --no-build-isolation -e . >> "$LOG" 2>&1 && imports_ok
    then log "install: into $("$PY" -c 'import sys; print(sys.prefix)') (editable checkout)"
    else KIT_MODE=target; log "install: into the environment failed (above); falling back to pip install --target"
    fi
  fi
  if [ "$KIT_MODE" = target ]; then
    rm -rf "$KIT/site"
    "${pip[@]}" --target "$KIT/site" "${wheels[@]}" >> "$LOG" 2>&1 || {
      log "install: pip install --target failed"; return 1; }
    export PYTHONPATH="$REPO:$KIT/site${PYTHONPATH:+:$PYTHONPATH}"
    imports_ok || { log "install: the packages still do not import (above)"; return 1; }
    log "install: wheels in $KIT/site, this checkout and they on PYTHONPATH"
  fi
  # `ppo-trt` is this Python's CLI whatever else is on PATH (the console script may be missing or another Python's)
  printf '#!/bin/sh\nexec "%s" -c "%s" "$@"\n' \
    "$("$PY" -c 'import sys; print(sys.executable)')" \
    "import sys; from ppo_trt.cli import main; sys.argv[0] = 'ppo-trt'; sys.exit(main())" > "$KIT/bin/ppo-trt"
  chmod +x "$KIT/bin/ppo-trt"
  export PATH="$KIT/bin:$PATH"
  { echo "KIT_MODE=$KIT_MODE"; echo "export PATH='$PATH'"
    [ -n "${PYTHONPATH:-}" ] && echo "export PYTHONPATH='$PYTHONPATH'"; } > "$KIT/install-$key.env"
  return 0
}

stage_start() {  # stage_start NAME: its log, deadline, install and GPU check
  STAGE=$1 LOG="$OUT/kit_$1.txt" STAGE_S=${KIT_STAGE_S:-540} DEADLINE=$(( SECONDS + ${KIT_STAGE_S:-540} ))
  : > "$LOG"
  log "stage $STAGE in $REPO ($(git rev-parse --short HEAD 2> /dev/null || echo 'no git')), output to $OUT"
  local t0=$SECONDS
  kit_install || { log "install failed: stage $STAGE cannot run"; return 1; }
  log "install: done in $(( SECONDS - t0 )) s"
  gpu_check
}

fresh_run() {  # a copy of the carried run folder, so a stage never writes into .gpu
  rm -rf "$KIT/run" && cp -r .gpu/run "$KIT/run" && [ -f "$KIT/run/policy.onnx" ] || {
    log "no run folder in .gpu/run (run tools/gpu_prepare.sh)"; return 1; }
}

stage_smoke() {
  stage_start smoke || return 1
  local f="$OUT/doctor.txt"; : > "$f"
  step nvidia-smi 30 "$f" nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv
  step versions 90 "$f" "$PY" -c "
import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda,
                         '| GPU', torch.cuda.get_device_name() if torch.cuda.is_available() else None)
import triton; print('triton', triton.__version__)"
  step doctor 120 "$f" ppo-trt doctor
  step cli-help 60 "$f" ppo-trt --help
  step mujoco 60 "$f" "$PY" -c "
import os, mujoco, gymnasium as gym
from ppo_trt.core.machine import machine_summary
print('MUJOCO_GL', os.environ.get('MUJOCO_GL'), '| mujoco', mujoco.__version__, '|', machine_summary())
e = gym.make('Hopper-v4'); e.reset(seed=0); print('Hopper-v4 steps:', e.step(e.action_space.sample())[1])"
  if [ -d .gpu/run ]; then ls -l .gpu/run >> "$f"; fi
}

stage_bench() {
  stage_start bench || return 1
  fresh_run || return 1
  local f="$OUT/bench.txt"; : > "$f"
  if [ -z "$GPU_WHY" ]; then
    step bench 420 "$f" ppo-trt bench --run-dir "$KIT/run" --backends $BENCH_BACKENDS \
      --batches 1,16,256,4096,65536,262144,1048576 --iters 5000 --closed-loop-steps 2000
  else
    echo "== no GPU ($GPU_WHY): a short CPU check of the same command; GPU backends record why they skip" >> "$f"
    step bench-cpu-check 300 "$f" ppo-trt bench --run-dir "$KIT/run" --backends $BENCH_BACKENDS --batches 1,16 \
      --iters 200 --warmup 20 --sweep-seconds 0.02 --closed-loop-steps 200
  fi
  cp "$KIT/run/bench.json" "$OUT/bench.json" 2> /dev/null || log "no bench.json was written"
}

stage_envs() {
  stage_start envs || return 1
  local f="$OUT/env_bench.txt"; : > "$f"
  if [ -z "$GPU_WHY" ]; then
    step env-bench 450 "$f" "$PY" tools/gpu_env_bench.py --device cuda --compile \
      --num-envs 1024,65536,1048576,16777216 --gym-max-envs 1024 --out "$OUT/env_bench.json"
  elif ! "$PY" -c "import torch" 2> /dev/null; then
    echo "== env-bench skipped: $GPU_WHY" >> "$f"; log "env-bench skipped: $GPU_WHY"
  else
    echo "== no GPU ($GPU_WHY): a short CPU check of the same command" >> "$f"
    step env-bench-cpu-check 300 "$f" "$PY" tools/gpu_env_bench.py --device cpu --num-envs 32,256 --steps 10 \
      --gym-max-envs 32 --out "$OUT/env_bench.json"
  fi
}

stage_ppo() {
  stage_start ppo || return 1
  local f="$OUT/fast.txt"; : > "$f"
  if [ -n "$GPU_WHY" ]; then
    echo "== fast PPO on CUDA: skipped: $GPU_WHY" >> "$f"
    echo "== pytest -m gpu: skipped: $GPU_WHY" > "$OUT/pytest_gpu.txt"
    log "fast PPO and pytest -m gpu skipped: $GPU_WHY"; return 0
  fi
  local name flags
  for name in eager cudagraphs compile; do
    flags=$([ $name = eager ] || echo "--$name")
    rm -rf "$KIT/cp_$name"
    step "train --fast $name" 70 "$f" ppo-trt train --fast --env-id CartPole-v1 --device cuda $flags \
      --run-dir "$KIT/cp_$name"
    cp "$KIT/cp_$name/train.json" "$OUT/fast_$name.json" 2> /dev/null && "$PY" -c "
import json; r = json.load(open('$OUT/fast_$name.json'))
print('$name', {k: r.get(k) for k in ('solved', 'final_eval_mean', 'solved_at_timesteps', 'solved_at_wall_s', 'wall_s',
                                      'steps_per_s')})" >> "$f" 2>&1
  done
  fresh_run || return 1
  PPO_TRT_RUN_DIR="$KIT/run" step "pytest -m gpu" 240 "$OUT/pytest_gpu.txt" \
    "$PY" -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider
}

case "${1:-}" in
  smoke|bench|envs|ppo) "stage_$1"; rc=$? ;;
  all) rc=0; for s in smoke bench envs ppo; do "stage_$s" || rc=$?; done ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d'; echo "usage: $0 smoke|bench|envs|ppo|all" >&2; exit 2 ;;
esac
echo; for f in "$OUT"/*.txt; do echo "--- $f"; tail -n 6 "$f"; done
exit $rc
