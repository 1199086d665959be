#!/usr/bin/env bash
# Re-profile one machine's CPU folder with the five commands of the README ("Limitations": the op families, the zoo
# with copies between two CPU targets, the grid, the architecture suite and its base sizes), each --rounds 3
# --max-rounds 6. A command the profile job's host check refuses (nothing timed) is run again every
# GAP_S seconds, up to TRIES times; any other failure stops the script. Afterwards: `autoplace train --profile DIR`,
# `python experiments/cost_model_eval.py --profile DIR --quick --seeds 1 --no-bands --out experiments/results/<id>-sNN`
# and keep the records only if the held-out figures hold (README "Where issue 11's criteria stand").
#
#     bash experiments/reprofile.sh profiles/<id> [TRIES] [GAP_S]
set -uo pipefail
dir=${1:?usage: bash experiments/reprofile.sh profiles/<id> [tries] [gap_s]}
tries=${2:-6}
gap_s=${3:-90}
autoplace=${AUTOPLACE:-autoplace}
suite="llama qwen2 mistral gpt2 opt roberta t5-encoder whisper-encoder vit swin convnext resnet mobilenetv2"
commands=(
  "--zoo ops --no-copies --no-end-to-end"
  "--zoo mlp cnn bert seed003 inception mlp-base cnn-base bert-base seed003-base inception-base --targets {\"cpu0\":\"llvm\",\"cpu1\":\"llvm\"}"
  "--zoo grid --no-copies"
  "--zoo $suite --no-copies"
  "--zoo $(for m in $suite; do printf '%s-base ' "$m"; done)--no-copies"
)
pending=("${!commands[@]}")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((try = 1; try <= tries && ${#pending[@]}; try++)); do
  refused=()
  for i in "${pending[@]}"; do
    echo "=== $(date +%T) try $try: autoplace profile --dir $dir ${commands[$i]}"
    # shellcheck disable=SC2086  # the command's words are meant to split
    TVM_NUM_THREADS=${TVM_NUM_THREADS:-2} "$autoplace" profile --dir "$dir" --rounds 3 --max-rounds 6 ${commands[$i]} \
      2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    if [ "$status" = 2 ] && grep -q "autoplace: error: host check" "$log"; then
      refused+=("$i")
    elif [ "$status" != 0 ]; then
      echo "failed (exit status $status)"; exit "$status"
    fi
  done
  pending=("${refused[@]}")
  if [ ${#pending[@]} -gt 0 ] && [ "$try" -lt "$tries" ]; then sleep "$gap_s"; fi
done
if [ ${#pending[@]} -gt 0 ]; then
  echo "refused $tries times: ${#pending[@]} of ${#commands[@]} commands (the host ran slow); run this again later"
  exit 2
fi
echo "all ${#commands[@]} commands done"
