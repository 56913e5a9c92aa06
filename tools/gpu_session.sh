#!/usr/bin/env bash
# The GPU kit's second half: every GPU check in one call of at most 6 minutes (KIT_QUICK_S, default 360 s), each step
# under its own hard limit, each writing its result under $OUT the moment it ends (8 files: what the device tool brings
# back), so a session cut off anywhere still returns what it measured. The first half is tools/gpu_prepare.sh.
#
# THE PLAN when a GPU machine is lent (15 minutes of device time in all: each start ~1-2 min, commands, idle, close).
#  Before, on the CPU box (no device time), in the checkout the session was started in (the device tool carries that
#  one, not a helper's worktree); status() says at no cost whether this task is lent a machine at all:
#   a. tools/gpu_prepare.sh [RUN_DIR]: .gpu/wheels (CPython 3.12 wheels of tools/gpu_carry.txt), .gpu/run, the size.
#   b. tools/gpu_rehearse.sh: this script end to end here, offline install and the GPU image's imports enforced; every
#      GPU step says why it skips, every stand-in passes, the records convert. Fix until it exits 0; commit.
#  On the device:
#   1. run(command="bash tools/gpu_session.sh quick", carry=[".gpu"], timeout_s=420): once (<= 6 min + the start);
#      the persistent kernel's batch-1 figures come first.
#   1b. At once on the warm machine (its install reused), MuJoCo XLA: with L = budget_left_s >= 300,
#        run(command="KIT_QUICK_S=<min(L-60, 300)> bash tools/gpu_session.sh quick mjx", carry=[".gpu"],
#            timeout_s=<min(L-30, 330)>)
#      (rows at 1 024 / 4 096 / 16 384 / 65 536 envs, each kept as it ends; a repeat call loads the compiled sizes
#      from the machine's JAX cache.)
#   2. give_back() at once, unless the next call follows within seconds (an idle machine costs the same as a busy one).
#   3. Read the reply's output_tail (the step table) and files_at/quick.json: every step ok / failed / timeout /
#      skipped / not run, with its reason; the logs beside it say why. Keep them at once:
#      python tools/gpu_records.py FILES_AT (-> benchmarks/<gpu>-<yyyy-mm-dd>/); commit.
#   4. Fix what broke on the CPU box; rehearse again.
#   5. status(): with L = budget_left_s >= 300, one more call for the steps that failed or did not run:
#        run(command="KIT_QUICK_S=<L-150> bash tools/gpu_session.sh quick persistent,bench,pytest", carry=[".gpu"],
#            timeout_s=<L-120>)
#      then give_back(); convert with --name <gpu>-<date>-2. Under 300 s left: stop (no machine starts under 4 min).
#   6. Closing note: the figures and the device, what broke on first contact and how it was fixed, device time used.
#
# Steps, in order (limit in s; `bash tools/gpu_session.sh plan` prints them; without a CUDA GPU the stand-in runs):
#   install 45         the wheels of .gpu/wheels and this checkout, offline   | same (KIT_INSTALL=none: as it is)
#   persistent 50      batch 1 on cuda-persistent (the resident kernel polling host-mapped memory): ppo-trt bench,
#                      10 000 checked calls and hot-path calls, p50/p99/p99.9, parity vs ORT FP32 (its records stay in
#                      the run's bench.json, which bench then adds to); then tools/gpu_persistent.py: parity one row at
#                      a time and a timed close (the stop flag ends the kernel)
#                                                                              | the host protocol against a thread
#                      standing in for the kernel (tools/gpu_persistent.py --simulated), 2 000 calls
#   nvidia-smi 10      name, driver, memory, clocks, compute capability       | skipped: no nvidia-smi
#   versions 30        Python, torch/CUDA, triton, JAX, ORT, the GPU          | same
#   doctor 30          ppo-trt doctor: every backend, available or why not    | same
#   bench 100          GPU backends: batch-1 checked call + kernel-only (CUDA events) p50/p99/p99.9, parity vs ORT
#                      FP32 on export_obs.npy, sweep to 1 048 576; ort-cuda/ort-trt/trt/trt-rtx recorded with the
#                      reason they cannot run                                  | the same command, batches 1-256
#   envs 60            env-bench CartPole on CUDA at 65 536 / 1 048 576 / 16 777 216 envs and the Triton CartPole
#                      kernel                                                  | CPU at 1 024 / 4 096 / 16 384
#   ppo-cudagraphs 60  train --fast CartPole-v1 --device cuda --cudagraphs (to 475)  | train --fast on the CPU
#   rollout 30         device rollout (CartPole, Pendulum, 1 048 576 envs) under torch.cuda.set_sync_debug_mode('error')
#                                                                              | the rollout on the CPU, unchecked
#   pytest 110         pytest -m gpu tests/test_gpu.py (KIT_PYTEST_K: -k)      | same: every test skips with its reason
#   ppo-eager 40       train --fast on CUDA without graphs, if >= 20 s are left | skipped (the stand-in was eager)
#  Only when named (`quick pytest,mjx`; not in a plain `quick`), writing mjx.txt and mjx.json beside the others:
#   mjx 200            Hopper-v4 on the GPU through MuJoCo XLA (tools/gpu_mjx.py: 1 024 / 4 096 / 16 384 / 65 536
#                      envs in that order, each row written as it ends, each size compiled once through JAX's
#                      persistent cache in $KIT_DIR/jax_cache (kept on the machine between calls, not under $OUT); env 0
#                      of the first size checked against MuJoCo's C) beside mujoco.batch and MujocoBatched on the
#                      machine's cores
#                                                                              | the same on the CPU, small sizes,
#                      when JAX and mujoco-mjx import, else skipped with the reason
# Files under $OUT: quick.json (the record, rewritten after every step), quick.txt (step log, install, nvidia-smi,
# versions, doctor), bench.txt (persistent's output first), bench.json, envs.txt, env_bench.json, ppo.txt,
# pytest_gpu.txt.
# Usage: tools/gpu_session.sh quick [STEP,...]   (STEPs: only these, after install; default all) | plan
# Environment: PPO_TRT_PY (default python3), KIT_INSTALL=auto|venv|target|none (auto: into the Python's own environment
# when it is writable and has setuptools, else pip install --target + PYTHONPATH; none: the Python already has the
# project, e.g. the CPU box's .venv), KIT_QUICK_S, KIT_GPU_DIR (default .gpu), KIT_DIR (default /tmp/ppo_trt_kit),
# KIT_IMAGE_GUARD=1 (imports limited to the GPU image's, tools/image_guard), KIT_PYTEST_K (pytest -k of the pytest
# step), KIT_MJX_ARGS (tools/gpu_mjx.py's arguments, replacing the step's own), OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/ppo_trt_gpu_out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
PY=${PPO_TRT_PY:-python3}
KIT=${KIT_DIR:-/tmp/ppo_trt_kit}; mkdir -p "$KIT/bin"  # kept between calls while the machine stays warm
GPUDIR=${KIT_GPU_DIR:-.gpu}
QUICK_S=${KIT_QUICK_S:-360}
MUJOCO_GL_WAS=${MUJOCO_GL-<unset>}
# nothing renders on the GPU machine: `disable` never loads a GL library (egl without its loaders fails inside
# PyOpenGL with an AttributeError that mujoco does not catch, and `import mujoco` takes bench down with it)
export MUJOCO_GL=disable PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore MPLBACKEND=Agg PPO_TRT_CACHE=$KIT/cache COLUMNS=160
if [ "${KIT_IMAGE_GUARD:-0}" = 1 ]; then
  export PYTHONPATH="$REPO/tools/image_guard${PYTHONPATH:+:$PYTHONPATH}"
  export KIT_IMAGE_ALLOW="$REPO/tools/gpu_image.txt:$REPO/tools/gpu_carry.txt" KIT_IMAGE_HIDDEN="$KIT/image_hidden.txt"
  rm -f "$KIT_IMAGE_HIDDEN"
fi
# the ones that cannot run there first (instant, so their reasons are kept whatever happens), the compiler last
GPU_BACKENDS=ort-cuda,ort-trt,trt,trt-rtx,torch-cuda,torch-cuda-graph,triton,triton-tf32,torch-compile
# name:limit_s[:min_s] in order; a step with a min runs only when that much of the session is left
# (the limits add up to more than the budget: a step that runs long takes from those after it, so the order is the
# priority; the budget's deadline stops every step, whatever its limit)
QUICK_PLAN=(install:45 persistent:50 nvidia-smi:10 versions:30 doctor:30 bench:100 envs:60 ppo-cudagraphs:60 rollout:30
            pytest:110 ppo-eager:40:20)
NAMED_PLAN=(mjx:200:60)  # run only when named
command -v timeout > /dev/null || timeout() { while [[ $1 == -* ]]; do shift 2; done; shift; "$@"; }  # no coreutils

log() { echo "[kit $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }
rec() {  # rec COMMAND ARGS...: tools/gpu_quick.py on quick.json (standard library only: no guard, no PYTHONPATH)
  local c=$1; shift
  PYTHONPATH='' KIT_IMAGE_ALLOW='' "$PY" "$REPO/tools/gpu_quick.py" "$c" "$QJ" "$@" 2>&1 | tee -a "$LOG"
}
now_ms() { date +%s%3N; }
plan_of() {  # plan_of NAME: sets LIMIT and MIN from QUICK_PLAN
  local e; for e in "${QUICK_PLAN[@]}" "${NAMED_PLAN[@]}"; do
    IFS=: read -r n l m <<< "$e"; [ "$n" = "$1" ] && { LIMIT=$l; MIN=${m:-5}; return 0; }; done
  echo "gpu_session: no step $1 in QUICK_PLAN" >&2; exit 2
}
wanted() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
named() { [[ ",$ONLY," == *",$1,"* ]]; }

step() {  # step NAME FILE CMD...: CMD under `timeout`, its limit cut to what the session has left; output to FILE
  local name=$1 file=$2; shift 2
  plan_of "$name"
  local left=$(( DEADLINE - SECONDS )) limit=$LIMIT
  (( limit > left )) && limit=$left
  if (( limit < MIN )); then
    log "$name: not run: ${left} s of the session's ${QUICK_S} s are left (it needs ${MIN} s)"
    echo "== $name: not run: the session's time is spent" >> "$file"
    rec step "$name" --not-run --limit "$LIMIT" --file "${file##*/}" \
      --reason "the session's ${QUICK_S} s budget is spent (${left} s left, needs ${MIN} s)" > /dev/null
    return 124
  fi
  echo "== $name (limit ${limit} s): $*" >> "$file"
  local t0 rc wall; t0=$(now_ms)
  timeout -k 3 "$limit" "$@" >> "$file" 2>&1; rc=$?
  wall=$(( $(now_ms) - t0 )); wall=$(( wall / 1000 )).$(( wall % 1000 / 100 ))
  echo "== $name: exit $rc after $wall s$( ((rc == 124 || rc == 137)) && echo ' (killed at its limit)')" >> "$file"
  rec step "$name" --limit "$limit" --wall "$wall" --rc "$rc" --file "${file##*/}" ${STAND_IN:+--stand-in "$STAND_IN"}
  return $rc
}

skip() {  # skip NAME FILE REASON: a step that cannot run here, and why
  echo "== $1: skipped: $3" >> "$2"
  rec step "$1" --skipped "$3" --file "${2##*/}"
}

gpu_check() {  # sets GPU_WHY to '' when torch sees a CUDA GPU, else to the reason
  GPU_WHY=$("$PY" -c "
import torch
if not torch.cuda.is_available():
    build = ' (CPU-only build)' if torch.version.cuda is None else ''
    raise SystemExit('torch ' + torch.__version__ + ' sees no CUDA GPU' + build)
print('GPU ' + torch.cuda.get_device_name())" 2>&1 | tail -n 1)
  if [[ $GPU_WHY == GPU\ * ]]; then log "$GPU_WHY"; rec set gpu --string "${GPU_WHY#GPU }" > /dev/null; GPU_WHY=''
  else log "no GPU: $GPU_WHY"; rec set gpu_why --string "$GPU_WHY" > /dev/null; fi
}

imports_ok() {  # SB3 needs torch: checked where torch imports
  "$PY" -c "
import importlib.util, ppo_trt.cli, ppo_trt.measure.bench, msgspec, gymnasium, mujoco
if importlib.util.find_spec('torch'): import stable_baselines3" >> "$LOG" 2>&1
}

kit_install() {  # the wheels of .gpu/wheels and this checkout, offline, within INSTALL_END; logs what it found and did
  local wheels=("$GPUDIR"/wheels/*.whl)
  if [ "${KIT_INSTALL:-auto}" = none ]; then  # the Python already has the project (the CPU box's own venv)
    KIT_MODE=none; imports_ok || { log "install: KIT_INSTALL=none, but the project does not import (above)"; return 1; }
  fi
  [ "${KIT_MODE:-}" = none ] || [ -e "${wheels[0]}" ] || {
    log "no wheels in $GPUDIR/wheels: run tools/gpu_prepare.sh on the CPU box, carry $GPUDIR"; return 1; }
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
      shutil.which('timeout'), '| cc', shutil.which('cc'))
PY
  KIT_MODE=${KIT_INSTALL:-auto}
  if [ "$KIT_MODE" = none ]; then log "install: none (KIT_INSTALL=none): $PY as it is"
  elif [ "$KIT_MODE" = auto ]; then
    if "$PY" -c "import os, sys, setuptools; assert os.access(sys.prefix, os.W_OK)" 2> /dev/null; then KIT_MODE=venv
    else KIT_MODE=target; log "install: $PY's environment is not writable or has no setuptools: pip install --target"
    fi
  fi
  pip_() {  # offline, no dependencies resolved, within what the install step has left
    timeout -k 3 "$(( INSTALL_END - SECONDS > 1 ? INSTALL_END - SECONDS : 1 ))" "$PY" -m pip install -q --no-index \
      --no-deps --no-compile --no-cache-dir --disable-pip-version-check "$@"
  }
  if [ "$KIT_MODE" = venv ]; then
    if pip_ "${wheels[@]}" >> "$LOG" 2>&1 && pip_ --no-build-isolation -e . >> "$LOG" 2>&1 && imports_ok
    then log "install: into $("$PY" -c 'import sys; print(sys.prefix)') (editable checkout)"
    else KIT_MODE=target; log "install: into the environment failed (above); falling back to pip install --target"
    fi
  fi
  if [ "$KIT_MODE" = target ]; then
    rm -rf "$KIT/site"
    pip_ --target "$KIT/site" "${wheels[@]}" >> "$LOG" 2>&1 || {
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

fresh_run() {  # a copy of the carried run folder, so the session never writes into .gpu
  rm -rf "$KIT/run" && cp -r "$GPUDIR/run" "$KIT/run" 2> /dev/null && [ -f "$KIT/run/policy.onnx" ]
}

train_line() {  # train_line NAME DIR: the train record into quick.json, its headline into ppo.txt
  [ -f "$2/train.json" ] || { echo "== $1: no train.json was written" >> "$OUT/ppo.txt"; return; }
  rec set "train.$1" --file "$2/train.json" > /dev/null
  "$PY" -c "
import json, sys; r = json.load(open(sys.argv[2]))
keys = 'device cudagraphs solved final_eval_mean solved_at_timesteps solved_at_wall_s wall_s steps_per_s call_wall_s'
print('== $1:', {k: r.get(k) for k in keys.split()})" "$1" "$2/train.json" \
    >> "$OUT/ppo.txt" 2>&1
}

quick() {  # the session: every step in order (or those of $1), each recorded as it ends
  ONLY=${1:-} LOG="$OUT/quick.txt" QJ="$OUT/quick.json" DEADLINE=$(( SECONDS + QUICK_S - 5 ))
  : > "$LOG"; rm -f "$QJ"
  local planned; planned=$(IFS=,; echo "${QUICK_PLAN[*]}")
  local commit; commit=$(git rev-parse --short HEAD 2> /dev/null)  # the device's copy may carry changes beyond it
  [ -n "$commit" ] && ! git diff --quiet HEAD -- 2> /dev/null && commit="$commit+changes"
  rec init --budget "$QUICK_S" --planned "$planned" --commit "$commit" > /dev/null
  log "quick in $REPO (${commit:-no git}), output to $OUT," \
      "budget ${QUICK_S} s${ONLY:+, steps $ONLY}"
  local t0 rc=0 wall ok=1 f
  plan_of install; INSTALL_END=$(( SECONDS + LIMIT )); t0=$(now_ms)
  kit_install || ok=0
  wall=$(( $(now_ms) - t0 )); wall=$(( wall / 1000 )).$(( wall % 1000 / 100 ))
  rec step install --limit "$LIMIT" --wall "$wall" --rc $((1 - ok)) --file quick.txt \
    ${KIT_MODE:+--reason "mode $KIT_MODE"} > /dev/null
  gpu_check
  no_install() { (( ok )) && return 1; skip "$1" "$2" "the offline install failed (quick.txt)"; }
  local gpu=$([ -z "$GPU_WHY" ] && echo 1) cpu="no CUDA GPU ($GPU_WHY): CPU stand-in"
  cpu_only() { [ -n "$gpu" ] || echo "$1"; }

  f="$OUT/bench.txt" PERSISTENT_RAN=''
  if wanted persistent && ! no_install persistent "$f"; then
    rm -f "$KIT/persistent.json"
    if ! fresh_run; then skip persistent "$f" "no run folder in $GPUDIR/run: run tools/gpu_prepare.sh"
    elif [ -n "$gpu" ]; then  # its bench records stay in $KIT/run/bench.json: the bench step adds to them
      step persistent "$f" bash -c 'ppo-trt bench --run-dir "$0" --backends cuda-persistent --replace \
          --closed-loop-steps 0 --batches 1 --iters 10000 --warmup 500 --sweep-seconds 0.02 &&
        "$1" tools/gpu_persistent.py --run-dir "$0" --out "$2" --iters 1000 --warmup 100' \
        "$KIT/run" "$PY" "$KIT/persistent.json" && PERSISTENT_RAN=1
    else
      STAND_IN="$cpu: the host protocol against a thread standing in for the kernel (simulated)" \
        step persistent "$f" "$PY" tools/gpu_persistent.py --run-dir "$KIT/run" --out "$KIT/persistent.json" \
        --simulated --iters 2000 --warmup 100
    fi
    [ -f "$KIT/persistent.json" ] && rec set persistent --file "$KIT/persistent.json" > /dev/null
  fi

  if wanted nvidia-smi; then
    if command -v nvidia-smi > /dev/null; then
      step nvidia-smi "$LOG" bash -c \
        'nvidia-smi && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv'
    else skip nvidia-smi "$LOG" "nvidia-smi is not on PATH"; fi
  fi
  wanted versions && step versions "$LOG" "$PY" tools/gpu_quick.py versions "$QJ"
  if wanted doctor && ! no_install doctor "$LOG"; then  # its JSON (every backend: available or why not) to quick.json
    [ -f "$KIT/run/policy.onnx" ] || fresh_run || log "doctor: no run folder in $GPUDIR/run"  # keeps persistent's
    rm -f "$KIT/doctor.json"
    step doctor "$LOG" bash -c 'ppo-trt doctor --json --run-dir "$0" 2>&1 > "$1"' "$KIT/run" "$KIT/doctor.json"
    rec set doctor --file "$KIT/doctor.json" > /dev/null
  fi

  f="$OUT/bench.txt"
  if wanted bench && ! no_install bench "$f"; then
    local keep=--replace  # after the persistent step: add to its records in the same run folder
    if [ -n "$PERSISTENT_RAN" ] && [ -f "$KIT/run/bench.json" ]; then keep=''; elif ! fresh_run; then keep=none; fi
    if [ "$keep" = none ]; then skip bench "$f" "no run folder in $GPUDIR/run: run tools/gpu_prepare.sh"
    elif [ -n "$gpu" ]; then
      step bench "$f" ppo-trt bench --run-dir "$KIT/run" --backends "$GPU_BACKENDS" $keep --closed-loop-steps 0 \
        --batches 1,16,256,4096,65536,262144,1048576 --iters 10000 --warmup 500 --sweep-seconds 0.1
    else
      STAND_IN="$cpu: the same command, batches 1-256 (GPU backends record why they skip)" \
        step bench "$f" ppo-trt bench --run-dir "$KIT/run" --backends "$GPU_BACKENDS" --replace --closed-loop-steps 0 \
        --batches 1,16,256 --iters 300 --warmup 30 --sweep-seconds 0.02
    fi
    cp "$KIT/run/bench.json" "$OUT/bench.json" 2> /dev/null || log "bench: no bench.json was written"
  fi

  f="$OUT/envs.txt"
  if wanted envs && ! no_install envs "$f"; then
    if [ -n "$gpu" ]; then
      step envs "$f" "$PY" tools/gpu_env_bench.py --device cuda --num-envs 65536,1048576,16777216 --steps 50 \
        --gym-max-envs 0 --train-max-envs 65536 --triton-launches 3 --out "$OUT/env_bench.json"
    else
      rec set skips.triton-cartpole --string "the Triton CartPole kernel is timed on a CUDA GPU only: $GPU_WHY" \
        > /dev/null
      STAND_IN="$cpu: env-bench on the CPU at 1 024 / 4 096 / 16 384 envs" \
        step envs "$f" "$PY" tools/gpu_env_bench.py --device cpu --num-envs 1024,4096,16384 --steps 10 \
        --gym-max-envs 0 --train-max-envs 1024 --out "$OUT/env_bench.json"
    fi
  fi

  f="$OUT/ppo.txt"
  if wanted ppo-cudagraphs && ! no_install ppo-cudagraphs "$f"; then
    if [ -n "$gpu" ]; then
      rm -rf "$KIT/cp_cudagraphs"
      step ppo-cudagraphs "$f" ppo-trt train --fast --env-id CartPole-v1 --device cuda --cudagraphs \
        --run-dir "$KIT/cp_cudagraphs"
      train_line cudagraphs "$KIT/cp_cudagraphs"
    else
      rm -rf "$KIT/cp_cpu"
      STAND_IN="$cpu (--cudagraphs needs one): train --fast on the CPU, eager" \
        step ppo-cudagraphs "$f" ppo-trt train --fast --env-id CartPole-v1 --device cpu --run-dir "$KIT/cp_cpu"
      train_line cpu "$KIT/cp_cpu"
    fi
  fi

  if wanted rollout && ! no_install rollout "$OUT/envs.txt"; then
    STAND_IN=$(cpu_only "$cpu: the same rollout on the CPU, no sync check") step rollout "$OUT/envs.txt" \
      "$PY" tools/gpu_quick.py rollout "$QJ" --cpu-envs 1024  # the CPU stand-in: 4 096 envs ran past 30 s on a busy box
  fi

  f="$OUT/pytest_gpu.txt"
  if wanted pytest && ! no_install pytest "$f"; then
    if fresh_run; then
      rm -f "$KIT/junit.xml"
      STAND_IN=$(cpu_only "$cpu: the same command, every test skips with its reason") \
        step pytest "$f" env PPO_TRT_RUN_DIR="$KIT/run" "$PY" -m pytest -q -n 0 -m gpu tests/test_gpu.py \
        ${KIT_PYTEST_K:+-k "$KIT_PYTEST_K"} -p no:cacheprovider -rs --junitxml "$KIT/junit.xml"
      rec pytest "$KIT/junit.xml" > /dev/null
    else skip pytest "$f" "no run folder in $GPUDIR/run: run tools/gpu_prepare.sh"; fi
  fi

  f="$OUT/ppo.txt"
  if wanted ppo-eager && ! no_install ppo-eager "$f"; then
    if [ -n "$gpu" ]; then
      rm -rf "$KIT/cp_eager"
      step ppo-eager "$f" ppo-trt train --fast --env-id CartPole-v1 --device cuda --run-dir "$KIT/cp_eager"
      train_line eager "$KIT/cp_eager"
    else skip ppo-eager "$f" "no CUDA GPU: the CPU stand-in of ppo-cudagraphs ran eager"; fi
  fi

  f="$OUT/mjx.txt"
  if named mjx && ! no_install mjx "$f"; then
    if "$PY" -c "import jax, mujoco.mjx" >> "$f" 2>&1; then
      STAND_IN=$(cpu_only "$cpu: MJX on the CPU's JAX, small sizes") \
        step mjx "$f" "$PY" tools/gpu_mjx.py --out "$OUT/mjx.json" \
        --cache-dir "$KIT/jax_cache" ${KIT_MJX_ARGS:-$([ -n "$gpu" ] && echo "--budget-s 150" ||
                           echo "--sizes 64,256 --steps 10 --cpu-sizes 16,64 --budget-s 100")}
    else skip mjx "$f" "JAX or mujoco-mjx does not import (mjx.txt): carry mujoco-mjx and trimesh (tools/gpu_carry.txt)"
    fi
  fi

  if [ -s "${KIT_IMAGE_HIDDEN:-/nonexistent}" ]; then  # what the rehearsal hid: absent on the GPU image too
    rec set image_guard_hidden --json "$(sort -u "$KIT_IMAGE_HIDDEN" | "$PY" -c '
import json, sys; print(json.dumps(dict(line.split() for line in sys.stdin if line.strip())))')" > /dev/null
    log "image guard: modules hidden (absent on the GPU image): $(cut -d' ' -f1 "$KIT_IMAGE_HIDDEN" | sort -u | xargs)"
  fi
  echo
  grep -h '^bench \|^env-bench \|^rollout \|^sync check\|^failed: \|^Triton CartPole\|^mjx ' "$OUT/bench.txt" \
    "$OUT/envs.txt" "$OUT/mjx.txt" \
    2> /dev/null | cut -c1-220
  grep -h '^== [a-z]*: {' "$OUT/ppo.txt" 2> /dev/null | cut -c1-300
  tail -n 3 "$OUT/pytest_gpu.txt" 2> /dev/null
  rec summary --wall "$SECONDS" || rc=1
  "$PY" -c "
import json, sys; s = json.load(open(sys.argv[1]))['steps']
sys.exit(any(x['status'] in ('failed', 'timeout') for x in s))" "$QJ" || rc=1
  return $rc
}

case "${1:-}" in
  quick) quick "${2:-}"; exit $? ;;
  plan) for e in "${QUICK_PLAN[@]}"; do IFS=: read -r n l m <<< "$e"; echo "$n $l ${m:-5}"; done
        for e in "${NAMED_PLAN[@]}"; do IFS=: read -r n l m <<< "$e"; echo "$n $l ${m:-5} named"; done
        echo "budget $QUICK_S" ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d'; echo "usage: $0 quick [STEP,...] | plan" >&2; exit 2 ;;
esac
