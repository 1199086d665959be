#!/usr/bin/env bash
# One `run` call on the GPU box that profiles it and times the plans on the same box (`run` calls may land on
# different boxes, whose speeds differ by up to 1.5x: session 27). Phases, each for at most its seconds:
#   1. gpu_carry/bundle  (the profile: kernels of both targets, copies, call overheads)  -> $OUT/profile/
#   2. gpu_carry/plans   (every plan, candidates included, round by round: side by side) -> $OUT/plans/
#   3. gpu_carry/extra   (optional: more kernels, e.g. CUDA-only training data, 1 round) -> $OUT/profile/ too
#                        (EXTRA_BUNDLES="gpu_carry/extra gpu_carry/extra2": several, in turn, sharing EXTRA_S)
#   [PROFILE_BUNDLE=gpu_carry/bundle PLAN_BUNDLE=gpu_carry/plans] \
#   bash experiments/gpu/one_call.sh PROFILE_S PLANS_S EXTRA_S [PROFILE_ROUNDS] [PLAN_ROUNDS]
# Bundles may travel gzipped (gpu_carry/packed/*.tgz, made by `tar czf gpu_carry/packed/X.tgz gpu_carry/X`: CUDA
# kernel libraries shrink ~5x, so four times the kernels fit the 64 MiB a call carries); they are unpacked first.
# At most 8 files come back: profile/{records.jsonl,metadata.json,run.log,gpu.txt,lscpu.txt}, plans/{records.jsonl,
# run.log}, timeline.txt.
set -u
profile_s=${1:-170}; plans_s=${2:-230}; extra_s=${3:-0}; profile_rounds=${4:-2}; plan_rounds=${5:-3}
root=$OUT
mkdir -p "$root/profile" "$root/plans"
for archive in gpu_carry/packed/*.tgz; do [ -f "$archive" ] && tar xzf "$archive"; done
timing=(--repeat 5 --min-repeat-ms 10)
echo "start $(date -u +%T)" > "$root/timeline.txt"
OUT=$root/profile BUNDLE=${PROFILE_BUNDLE:-gpu_carry/bundle} bash experiments/gpu/measure.sh "$profile_s" --rounds "$profile_rounds" "${timing[@]}"
echo "profile done at ${SECONDS} s" >> "$root/timeline.txt"
OUT=$root/plans BUNDLE=${PLAN_BUNDLE:-gpu_carry/plans} bash experiments/gpu/measure.sh "$plans_s" --rounds "$plan_rounds" "${timing[@]}"
rm -f "$root/plans/gpu.txt" "$root/plans/lscpu.txt" "$root/plans/metadata.json"
echo "plans done at ${SECONDS} s" >> "$root/timeline.txt"
extra_end=$((SECONDS + extra_s))
for extra in ${EXTRA_BUNDLES:-gpu_carry/extra}; do
  left=$((extra_end - SECONDS))
  if [ "$left" -gt 15 ] && [ -f "$extra/manifest.json" ]; then
    # Same records file as the profile (other keys; the runner skips what is there); its log goes to the timeline.
    export PYTHONUNBUFFERED=1 PYTHONPATH=gpu_carry/rt TVM_USE_RUNTIME_LIB=1
    timeout "$left" python3 "$extra/runner.py" "$extra" --out "$root/profile/records.jsonl" \
        --rounds 1 "${timing[@]}" > "$root/extra.log" 2>&1
    echo "$extra rc $? done at ${SECONDS} s" >> "$root/timeline.txt"
    tail -5 "$root/extra.log" >> "$root/timeline.txt"; rm -f "$root/extra.log"
  fi
done
cat "$root/timeline.txt"
