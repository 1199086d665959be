#!/usr/bin/env bash
# Build here (~5 min on 2 cores) what the GPU call refused in session 38 needed (run as session 41's call 1), into gpu_carry/ (git-ignored):
#   gpu_carry/topk   detect-base's CPU kernels, top-k included (its CPU plans failed on the box: the runner now loads
#                    libtvm_runtime_extra.so, where tvm.contrib.sort.topk lives)
#   gpu_carry/plans2 the plans of mlp-base cnn-base bert-base inception-base detect-base llama-base (GPU capped at
#                    10 MB) priced on the box's profile, with candidates under scaled costs and GPU -> CPU hand-offs,
#                    and the hand-off probes (experiments/gpu/handoff_probes.py)
# Then: mv profiles /work/profiles_hold; run (carry gpu_carry, kind nvidia-h200, timeout ~330):
#   PROFILE_BUNDLE=gpu_carry/topk PLAN_BUNDLE=gpu_carry/plans2 bash experiments/gpu/one_call.sh 60 220 0 3 10
# and back here: mv /work/profiles_hold profiles; see experiments/gpu/README.md for the merge and the tables.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
export MCPU=${MCPU:-emeraldrapids}
BOX=${BOX:-profiles/intel-r-xeon-r-processor-f6m207-16c-nvidia-h200}
TARGETS="{\"cpu\": {\"kind\": \"llvm\", \"mcpu\": \"$MCPU\"}, \"gpu\": {\"kind\": \"cuda\", \"arch\": \"sm_90\"}}"
MODELS=(mlp-base cnn-base bert-base inception-base detect-base llama-base)
# the runtime-only TVM and its FFI wheel (pack.sh), with a first bundle: detect-base's CPU kernels
PYTHON=$PY bash experiments/gpu/pack.sh --zoo detect-base --targets "$TARGETS" --bundle-kinds llvm --rounds 2 --no-copies
mv gpu_carry/bundle gpu_carry/topk
"$PY" experiments/gpu/plans.py --bundle gpu_carry/plans2 --models "${MODELS[@]}" --profile "$BOX" \
    --gpu-cap-mb llama-base=10 --variants cpu=0.7 cpu=1.4 gpu=0.7 gpu=1.4 handoff=15 handoff=30 handoff=60 handoff=120 \
    --out gpu_carry/plans2.json
"$PY" experiments/gpu/handoff_probes.py --bundle gpu_carry/plans2
du -sh gpu_carry gpu_carry/*
echo "with the working tree: must stay under 64 MiB (profiles/ moved out)"
