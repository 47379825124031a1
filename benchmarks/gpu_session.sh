#!/usr/bin/env bash
# One sitting on a GPU lent for a few minutes (issue 53): the GPU speedrun against nanoGPT, then the
# CUDA lane with the time left, each writing its record into OUT_DIR as it goes.
#
#   bash benchmarks/gpu_session.sh OUT_DIR NANOGPT_CHECKOUT SECONDS
#
# SECONDS is the whole sitting (at least 300): the speedrun gets about 60% of it (nanoGPT's run to
# step 2000 takes about 90 s of that on an H200), the lane the rest (unit tests, then chapters 8 at
# a time until its time is up: those not reached are listed as not run). Run it under a timeout a
# little longer than SECONDS. Copy OUT_DIR/gpu_speedrun.json to course_lib/records/ afterwards.
set -u
out=${1:?OUT_DIR}; nanogpt=${2:?NANOGPT_CHECKOUT}; total=${3:?SECONDS}
if [ "$total" -lt 300 ]; then echo "gpu_session.sh: SECONDS must be at least 300, got $total"; exit 2; fi
mkdir -p "$out"
export PYTHONUNBUFFERED=1
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/nvidia-smi.csv" || true
speedrun=$((total * 6 / 10))
search=$((speedrun - 200))
[ "$search" -lt 0 ] && search=0
timeout "$speedrun" python3 benchmarks/gpu_speedrun.py --nanogpt "$nanogpt" --search-time "$search" \
    --out /tmp/gpu-speedrun --json "$out/gpu_speedrun.json" 2>&1 | tee "$out/gpu_speedrun.log"
left=$((total - ($(date +%s) - start) - 20))
unit=$((left * 4 / 10))
chapters=$((left - unit - 10))
if [ "$unit" -ge 30 ] && [ "$chapters" -ge 30 ]; then
    python3 -m course_lib.tools gpu-lane --workers 12 --unit-time "$unit" --jobs 8 \
        --chapters-time "$chapters" --json "$out/gpu_lane.json" 2>&1 | tee "$out/gpu_lane.log"
else
    echo "gpu_session.sh: $left s left: too little for the lane" | tee "$out/gpu_lane.log"
fi
