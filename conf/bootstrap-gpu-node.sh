#!/usr/bin/env bash
# EMR bootstrap action for a GPU node: install gpumr (with PyCUDA when a CUDA
# toolkit is present) and start the node-local GPU scheduler service.
set -euo pipefail
PY=${PYTHON:-python3}
$PY -m pip install --quiet gpumr
if command -v nvcc >/dev/null 2>&1 || [ -d /usr/local/cuda ]; then
  PATH=$PATH:/usr/local/cuda/bin $PY -m pip install --quiet 'gpumr[gpu]' || echo "pycuda build failed: GPU path disabled, CPU path unaffected" >&2
fi
install -d -m 0755 /run/gpumr
# The socket is group-accessible to the Hadoop task user via the directory.
nohup $PY -m gpumr scheduler serve --socket /run/gpumr/scheduler.sock --policy least-processes \
  --socket-mode 0666 >/var/log/gpumr-scheduler.log 2>&1 &
