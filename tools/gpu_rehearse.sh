#!/usr/bin/env bash
# The GPU session rehearsed on the CPU box, before a GPU machine is asked for: tools/gpu_session.sh quick as it will run
# there, on this checkout's venv, with
#  - the offline install exercised: the wheels of tools/gpu_carry.txt (for this Python; the GPU machine gets CPython
#    3.12's from tools/gpu_prepare.sh) installed with pip --target into the kit's folder and put first on PYTHONPATH
#    (KIT_INSTALL=target: the venv itself is not touched);
#  - the GPU image's imports enforced (KIT_IMAGE_GUARD=1, tools/image_guard): what the image lacks is absent here too;
#  - the run folder of .gpu/run (tools/gpu_prepare.sh makes it).
# Then the records converter on what the session wrote (into OUT/records) and the carried size. Without a GPU every GPU
# step says why it skips and its CPU stand-in runs: the rehearsal passes when none failed or ran out of time, the
# records convert and the tree travels.
# Usage: tools/gpu_rehearse.sh [OUT]   (default /tmp/ppo_trt_rehearsal; emptied first)
# Environment: PPO_TRT_PY (default .venv/bin/python), KIT_QUICK_S (default 360), KIT_INSTALL (default target; none:
# skip the install and use the venv as it is), KIT_GPU_RUN (the run folder, default .gpu/run).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PPO_TRT_PY:-.venv/bin/python}
PY=$(command -v "$PY") || { echo "gpu_rehearse: no ${PPO_TRT_PY:-.venv/bin/python}: make the project's venv" >&2
                            exit 2; }
OUT=${1:-/tmp/ppo_trt_rehearsal}
RUN=${KIT_GPU_RUN:-.gpu/run}
[ -f "$RUN/policy.onnx" ] || { echo "gpu_rehearse: no $RUN/policy.onnx: run tools/gpu_prepare.sh first" >&2; exit 2; }
rm -rf "$OUT" && mkdir -p "$OUT/session" "$OUT/gpu/wheels" && OUT=$(cd "$OUT" && pwd)
cp -r "$RUN" "$OUT/gpu/run"
mode=${KIT_INSTALL:-target}
if [ "$mode" != none ]; then
  pins=$("$PY" tools/gpu_quick.py pins tools/gpu_carry.txt) || exit 2
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$OUT/gpu/wheels" $pins 2>&1 \
    | sed '/is ignored: it is neither a file nor a directory/d'  # this box's pip.conf
fi
t0=$SECONDS
KIT_GPU_DIR="$OUT/gpu" KIT_DIR="$OUT/kit" PPO_TRT_PY="$PY" KIT_INSTALL=$mode KIT_IMAGE_GUARD=1 OUT="$OUT/session" \
  bash tools/gpu_session.sh quick; rc=$?
echo "gpu_rehearse: quick exited $rc after $(( SECONDS - t0 )) s (budget ${KIT_QUICK_S:-360} s)"
"$PY" tools/gpu_records.py "$OUT/session" --dest "$OUT/records" || rc=1
"$PY" tools/gpu_quick.py carried || rc=1
exit $rc
