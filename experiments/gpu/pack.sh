#!/usr/bin/env bash
# Pack what a GPU box (Python 3.12, CUDA, no network, no TVM compiler) needs to profile and time here-built
# kernels and placed models:  gpu_carry/{rt/tvm (runtime-only TVM), wheels/ (tvm-ffi for cp312), bundle/}.
#
#   bash experiments/gpu/pack.sh [bundle options...]      # default: the zoo + the stride grid, CPU + CUDA, 3 rounds
#   (CPU kernels for $MCPU, default x86-64-v3 (AVX2): a plain "llvm" would compile for *this* machine's CPU, not
#   the box's. MCPU=emeraldrapids for session 27's Xeon box with AVX-512: its builds ran 0.54-0.99x as long)
#
# Then, on the device (see experiments/gpu/README.md):
#   pip install --no-deps --no-index gpu_carry/wheels/*.whl
#   PYTHONPATH=gpu_carry/rt TVM_USE_RUNTIME_LIB=1 python gpu_carry/bundle/runner.py gpu_carry/bundle --out $OUT/records.jsonl
set -euo pipefail
cd "$(dirname "$0")/../.."
CARRY=gpu_carry
PY=${PYTHON:-python3}
rm -rf "$CARRY" && mkdir -p "$CARRY/rt" "$CARRY/wheels"
SITE=$("$PY" -c "import os, tvm; print(os.path.dirname(os.path.dirname(tvm.__file__)))")
FFI=$("$PY" -c "import tvm_ffi; print(tvm_ffi.__version__)")
# Runtime-only TVM: the Python package without the 259 MB compiler library and the sources/headers.
cp -r "$SITE/tvm" "$CARRY/rt/tvm"
rm -rf "$CARRY/rt/tvm/lib/libtvm_compiler.so" "$CARRY/rt/tvm/3rdparty" "$CARRY/rt/tvm/include" "$CARRY/rt/tvm/src" \
       "$CARRY/rt/tvm/web" "$CARRY/rt/tvm/cmake" "$CARRY/rt/tvm/licenses"
find "$CARRY/rt" -name __pycache__ -prune -exec rm -rf {} +
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 -d "$CARRY/wheels" "apache-tvm-ffi==$FFI"
if [ "$#" -eq 0 ]; then
  set -- --zoo mlp cnn bert seed003 inception mlp-base cnn-base bert-base inception-base seed003-base grid \
         --targets "{\"cpu\": {\"kind\": \"llvm\", \"mcpu\": \"${MCPU:-x86-64-v3}\"}, \"gpu\": {\"kind\": \"cuda\", \"arch\": \"sm_90\"}}" --rounds 3
fi
"$PY" -m autoplace profile "$@" --bundle "$CARRY/bundle"
du -sh "$CARRY" "$CARRY"/*
echo "carry '$CARRY' (must stay under 64 MiB)"
