#!/usr/bin/env bash
# Build here what the next GPU call needs for issue 14's missing items (experiments/gpu/README.md, "Next GPU session"),
# into gpu_carry/ (git-ignored), each bundle gzipped into gpu_carry/packed/ (CUDA and CPU libraries shrink ~5x):
#   gpu_carry/ctx    the six models' CPU kernels for the box's CPU, and each model built on the CPU (`model` items: timed
#                    end to end, its kernels in context by the bundle's in_context.py), 3 rounds: what the box's CPU-heavy
#                    plans were mispriced without (14-20% low)
#   gpu_carry/ops    the op families' CPU kernels for the box's CPU (no end to end): the box's CPU model trains on 400
#                    kernels, the CPU machines' on 1600
#   gpu_carry/grid   the stride grid's CPU kernels and single-kernel models for the box's CPU
# Session 42 (Zen 3, 2 cores): 9 minutes; ctx 97 kernels + 6 models, ops 861 kernels, grid 149 kernels + 149 models;
# packed 1.3 + 4.0 + 3.2 MB, with rt (16 MB), wheels (3.2 MB) and the working tree (13 MB) 40 MB of the 64 MiB a call
# carries. On the box ~0.1-0.2 s a kernel: ops and grid may need a second call (the runner resumes).
# Then: mv profiles /work/profiles_hold; run (carry ["gpu_carry/rt", "gpu_carry/wheels", "gpu_carry/packed"], timeout ~400):
#   PROFILE_BUNDLE=gpu_carry/ctx PLAN_BUNDLE=none EXTRA_BUNDLES="gpu_carry/ops gpu_carry/grid" \
#       bash experiments/gpu/one_call.sh 150 0 220 3 1
# and back here: mv /work/profiles_hold profiles; merge (remote.merge_records) into profiles/<box>, `autoplace train
# --profile profiles/<box>`, then price the plans again (plans.py --no-build, table.py --resolved).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
export MCPU=${MCPU:-emeraldrapids}
CPU="{\"cpu\": {\"kind\": \"llvm\", \"mcpu\": \"$MCPU\"}}"
MODELS=(mlp-base cnn-base bert-base inception-base detect-base llama-base)
# the runtime-only TVM and its FFI wheel (pack.sh), with the first bundle
PYTHON=$PY bash experiments/gpu/pack.sh --zoo "${MODELS[@]}" --targets "$CPU" --rounds 3 --no-copies
mv gpu_carry/bundle gpu_carry/ctx
"$PY" -m autoplace profile --zoo ops --targets "$CPU" --bundle gpu_carry/ops --no-copies --no-end-to-end
"$PY" -m autoplace profile --zoo grid --targets "$CPU" --bundle gpu_carry/grid --no-copies
mkdir -p gpu_carry/packed
for b in ctx ops grid; do tar czf "gpu_carry/packed/$b.tgz" "gpu_carry/$b"; done
du -sh gpu_carry/rt gpu_carry/wheels gpu_carry/packed gpu_carry/packed/*
echo "carry rt, wheels and packed (with the working tree: under 64 MiB, profiles/ moved out)"
