#!/usr/bin/env bash
# On the GPU box (the `run` tool, carry gpu_carry): install the runtime-only TVM's FFI wheel, say what the box is,
# then time the bundle with runner.py for at most SECONDS (default 390), resuming after a crash (the runner skips
# the item that killed it). Everything lands in $OUT: records.jsonl, metadata.json, run.log, gpu.txt, lscpu.txt.
#   [BUNDLE=gpu_carry/plans] bash experiments/gpu/measure.sh [SECONDS] [runner options...]
set -u
budget=${1:-390}; shift || true
bundle=${BUNDLE:-gpu_carry/bundle}
export PYTHONUNBUFFERED=1 PYTHONPATH=gpu_carry/rt TVM_USE_RUNTIME_LIB=1
python3 -m pip install -q --no-deps --no-index gpu_carry/wheels/*.whl 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max --format=csv > "$OUT/gpu.txt" 2>&1
lscpu > "$OUT/lscpu.txt" 2>&1
cat "$OUT/gpu.txt"; grep -m1 "Model name" "$OUT/lscpu.txt"; nproc
python3 -c "import sys; sys.path.insert(0, '$bundle'); import tvm, runner
print(runner.load_device_runtimes(tvm), 'cuda present:', tvm.cuda().exist)" 2>&1 | tail -3
end=$((SECONDS + budget))
for pass in 1 2 3 4 5; do
  left=$((end - SECONDS)); [ "$left" -gt 15 ] || break
  timeout "$left" python3 "$bundle/runner.py" "$bundle" --out "$OUT/records.jsonl" "$@" >> "$OUT/run.log" 2>&1
  rc=$?; echo "runner pass $pass: rc $rc after $SECONDS s"; tail -2 "$OUT/run.log"
  [ "$rc" -eq 0 ] && break
done
wc -l "$OUT/records.jsonl"; grep -c '"status":"error"' "$OUT/records.jsonl"; grep '"status":"error"' "$OUT/records.jsonl" | head -3 | cut -c1-400
