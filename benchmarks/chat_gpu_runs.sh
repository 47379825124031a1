#!/bin/bash
# Issue 54's GPU runs (records/chat_model_runs.json, the runs chat-gpu-*): three variants x seeds 0-2
# of `python -m course_lib chat-sft`, all nine at once on one GPU, each stopped by Ctrl-C (SIGINT:
# saved at a step boundary) after TIMEOUT_S seconds if not done, then a float16 copy of each without
# its optimizer (benchmarks/chat_sft.py's slim) in OUTDIR, which is what was scored. Run from a copy
# of the repository holding course_lib/ (PYTHONPATH is set to this script's folder's parent):
#
#     bash benchmarks/chat_gpu_runs.sh cuda 6000 9000 420 OUTDIR    # as run on an NVIDIA H200
#
# control: chat-char-cpu-3 (the chat model shipped before; git show fb216c9:course_lib/weights/...)
# trained further on chat.json alone; more: the same with --more-phrasings; base: the Shakespeare
# base, its context lengthened to 256, with --more-phrasings. Each run's log has its "done in"
# line (the wall time the record keeps).
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PYTHONPATH=$here PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
DEV=$1; NC=$2; NB=$3; TMO=$4; DEST=$5
mkdir -p "$DEST" work
python3 -c "import torch; print(torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"
nproc; date -u
W=course_lib/weights
COMMON="--pack --set eval_interval=500 --set eval_iters=4 --set checkpoint_interval=1000"
pids=()
for s in 0 1 2; do
  for v in control more base; do
    case $v in
      control) args="--checkpoint $W/chat-char-cpu-3.pt $COMMON --max-iters $NC";;
      more) args="--checkpoint $W/chat-char-cpu-3.pt $COMMON --more-phrasings --max-iters $NC";;
      base) args="--checkpoint $W/shakespeare-char-cpu.pt $COMMON --more-phrasings --set block_size=256 --max-iters $NB";;
    esac
    name=$v-s$s
    ( start=$(date +%s.%N)
      timeout -s INT "$TMO" python3 -m course_lib chat-sft --device "$DEV" $args --set seed=$s --out work/$name > "$DEST/$name.log" 2>&1
      echo "rc $? wall_s $(python3 -c "import time; print(round(time.time() - $start, 1))")" >> "$DEST/$name.log"
      python3 -c "
import sys, torch
from course_lib.checkpoint import load_checkpoint, write_atomic
ck = load_checkpoint('work/$name/ckpt.pt')
ck['model'] = {k: v.half() if v.is_floating_point() else v for k, v in ck['model'].items()}
ck['optimizer'], ck['rng'] = None, None
write_atomic('$DEST/$name.pt', ck)
print('slim', ck['step'])" >> "$DEST/$name.log" 2>&1 ) &
    pids+=($!)
  done
done
( while sleep 30; do date -u; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null; uptime; for f in "$DEST"/*.log; do echo "$(basename $f): $(tr '\r' '\n' < $f | grep -o '[0-9]*/[0-9]* \[[^]]*' | tail -1)"; done; done ) &
mon=$!
wait "${pids[@]}"
kill $mon
date -u
