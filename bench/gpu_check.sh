#!/usr/bin/env bash
# One call on a machine with an NVIDIA GPU: install gpumr beside what the machine
# has, show the GPU, run the GPU tests (agreement with the CPU), then time the
# GPU paths. Carried wheels for anything missing go in .whl/ (see the device
# tool's README); PyCUDA or CuPy must be importable.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${GPUMR_SITE:-/tmp/gpumr-site}
OUT=${OUT:-/tmp/gpumr-gpu-check}
mkdir -p "$SITE" "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl
fi
$PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" .
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,compute_mode,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
$PY -m gpumr probe | tee -a "$OUT/gpu.txt"
$PY -m gpumr build-kernels -o "$SITE/kernels" --arch "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)"
export GPUMR_KERNEL_DIR="$SITE/kernels"
(cd tests && $PY -m pytest -q -p no:cacheprovider -rs test_gpu.py test_haar.py test_ct.py 2>&1 | tee "$OUT/tests.txt")
PYTHONUNBUFFERED=1 $PY bench/backproject_gpu.py --job 2>&1 | tee "$OUT/backproject_gpu.txt"
PYTHONUNBUFFERED=1 $PY bench/face_gpu.py --frames "${FRAMES:-2000}" 2>&1 | tee "$OUT/face_gpu.txt"
