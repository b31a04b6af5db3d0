#!/usr/bin/env bash
# EMR bootstrap action for every node: install gpumr from the sdist mrjob
# uploads with it (first argument), with PyCUDA where a CUDA toolkit is
# present, and start the node-local GPU scheduler service on GPU nodes.
#   python -m build --sdist   (or: python setup.py sdist)  -> dist/gpumr-X.tar.gz
set -euo pipefail
SDIST=${1:?usage: bootstrap-gpu-node.sh gpumr-X.tar.gz}
PY=${PYTHON:-python3}
$PY -m pip install --quiet "$SDIST"
if command -v nvidia-smi >/dev/null 2>&1; then
  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    PATH=$PATH:/usr/local/cuda/bin $PY -m pip install --quiet pycuda \
      || echo "pycuda build failed: GPU path disabled, CPU path unaffected" >&2
  fi
  install -d -m 0755 /run/gpumr
  # The Hadoop task user must reach the socket: open it to the node's users.
  nohup $PY -m gpumr scheduler serve --socket /run/gpumr/scheduler.sock --policy least-processes \
    --socket-mode 666 >/var/log/gpumr-scheduler.log 2>&1 &
fi
