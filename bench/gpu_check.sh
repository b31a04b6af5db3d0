#!/usr/bin/env bash
# One call on a machine with an NVIDIA GPU, within 10 minutes:
#   1. install gpumr beside what the machine has (carried wheels for anything
#      missing go in .whl/, see the device tool's README; PyCUDA or CuPy must
#      be importable), show the GPU, build the kernels for it;
#   2. the model's predictions first (bench/gpu_model.py --quick; needs nvcc and
#      the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels), so that they
#      stand before any measurement;
#   3. equality on the real device: the GPU tests (faces equal OpenCV, slabs
#      within 1e-5 of the CPU, each device's self-check);
#   4. measured: backprojection GUPS (kernel, slab path) and face fps (kernel
#      path), CPU and GPU together (the jobs with --device auto) against each
#      alone;
#   5. a last table: each measured figure beside the model's prediction.
# Without a GPU it says so and exits 1, having checked nothing.
set -euo pipefail
case $0 in */*) cd "${0%/*}/.." ;; *) cd .. ;; esac  # the repository root (no dirname: PATH may be bare)
PY=${PYTHON:-python3}
SITE=${GPUMR_SITE:-/tmp/gpumr-site}
OUT=${OUT:-/tmp/gpumr-gpu-check}
FRAMES=${FRAMES:-600}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi is missing or sees no device): nothing was checked;" \
       "run bench/gpu_check.sh on a machine with a GPU (bench/gpu_model.py predicts without one)" >&2
  exit 1
fi

mkdir -p "$SITE" "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl
fi
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" .
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,compute_mode,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
"$PY" -m gpumr probe | tee -a "$OUT/gpu.txt"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
"$PY" -m gpumr build-kernels -o "$SITE/kernels" --arch "$arch"
export GPUMR_KERNEL_DIR="$SITE/kernels"

# 2. predictions before measurements
if PYTHONUNBUFFERED=1 timeout 240 "$PY" bench/gpu_model.py --quick >"$OUT/model.txt" 2>&1; then
  echo "gpu_check: model predictions in $OUT/model.txt"
else
  echo "gpu_check: the model did not run here (see $OUT/model.txt); measurements follow without it" >&2
fi

# 3. equality on the device
status=0
(cd tests && "$PY" -m pytest -q -p no:cacheprovider -rs test_gpu.py test_haar.py test_ct.py test_gpu_paths.py \
  >"$OUT/tests.txt" 2>&1) || status=$?
tail -n 5 "$OUT/tests.txt"

# 4. measurements (the CPU and GPU together in each script's job rows)
PYTHONUNBUFFERED=1 timeout 200 "$PY" bench/backproject_gpu.py --sizes 512 --angles 512 --slab 16 --job \
  >"$OUT/backproject_gpu.txt" 2>&1 || echo "gpu_check: bench/backproject_gpu.py failed or ran out of time" >&2
PYTHONUNBUFFERED=1 timeout 200 "$PY" bench/face_gpu.py --frames "$FRAMES" --batch 16 \
  >"$OUT/face_gpu.txt" 2>&1 || echo "gpu_check: bench/face_gpu.py failed or ran out of time" >&2

# 5. measured beside predicted
echo
echo "== predicted (bench/gpu_model.py; no GPU ran for these) =="
grep -A 3 "^PREDICTIONS" "$OUT/model.txt" || echo "(no model output)"
echo
echo "== measured on $(head -2 "$OUT/gpu.txt" | tail -1 | cut -d, -f1) =="
grep -iE "GUPS|kernel|slab|cpu|auto" "$OUT/backproject_gpu.txt" | tail -n 12 || true
grep -iE "fps|frames/s|cpu|gpu|auto" "$OUT/face_gpu.txt" | tail -n 12 || true
if [ "$status" -ne 0 ]; then
  echo "gpu_check: the equality tests FAILED on the device (see $OUT/tests.txt)" >&2
fi
exit "$status"
