#!/usr/bin/env bash
# EMR bootstrap action for every node (run as root by mrjob's `bootstrap:` lines):
#   1. install gpumr from its sdist (the first argument; mrjob uploads it) into a virtual
#      environment of the node's system Python (3.9+: EMR 7.x on Amazon Linux 2023);
#   2. on a node with an NVIDIA driver (nvidia-smi), add CuPy (binary wheels, no CUDA toolkit
#      needed) so that map tasks can launch gpumr's kernels;
#   3. start the node-local GPU scheduler service, its socket reachable by the YARN task
#      user's group only: folder root:$GROUP mode 2770 (setgid), socket mode 660, umask 007.
#
# usage: bootstrap-gpu-node.sh gpumr-X.tar.gz
#   python -m build --sdist   (or: python setup.py sdist)  -> dist/gpumr-X.tar.gz
#
# Everything it touches is under these (defaults for a node; the tests point them into a temp folder):
#   GPUMR_ROOT      prefix of every path below                (default: none, i.e. /)
#   GPUMR_VENV      the virtual environment                   ($GPUMR_ROOT/opt/gpumr/venv)
#   GPUMR_RUN_DIR   the socket's folder                       ($GPUMR_ROOT/run/gpumr)
#   GPUMR_LOG       the service's log                         ($GPUMR_ROOT/var/log/gpumr-scheduler.log)
#   GPUMR_GROUP     the group of the task user                (hadoop)
#   GPUMR_GPU       auto (nvidia-smi decides), yes or no      (auto)
#   GPUMR_SERVICE   auto (systemd if running, else nohup), systemd or nohup
#   GPUMR_PIP_OPTS  extra pip options, e.g. --no-index --find-links DIR (none)
#   PYTHON          the Python to make the environment from   (python3)
set -euo pipefail

SDIST=${1:?usage: bootstrap-gpu-node.sh gpumr-X.tar.gz}
ROOT=${GPUMR_ROOT:-}
VENV=${GPUMR_VENV:-$ROOT/opt/gpumr/venv}
RUN_DIR=${GPUMR_RUN_DIR:-$ROOT/run/gpumr}
LOG=${GPUMR_LOG:-$ROOT/var/log/gpumr-scheduler.log}
GROUP=${GPUMR_GROUP:-hadoop}
GPU=${GPUMR_GPU:-auto}
SERVICE=${GPUMR_SERVICE:-auto}
PYTHON=${PYTHON:-python3}
read -r -a PIP_OPTS <<< "${GPUMR_PIP_OPTS:-}"

say() { echo "gpumr bootstrap: $*" >&2; }

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 9))' \
  || { say "$PYTHON is older than 3.9: gpumr does not install there (use EMR 7.x)"; exit 1; }
getent group "$GROUP" >/dev/null || { say "no group $GROUP on this node (set GPUMR_GROUP)"; exit 1; }

"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet "${PIP_OPTS[@]}" "$SDIST"
version=$("$VENV/bin/gpumr" --version)
say "installed $version in $VENV"

if [ "$GPU" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then GPU=yes; else GPU=no; fi
fi
if [ "$GPU" = yes ]; then
  "$VENV/bin/python" -m pip install --quiet "${PIP_OPTS[@]}" cupy-cuda12x \
    || say "CuPy did not install: GPU path disabled, the CPU path is unaffected"
fi

# The socket's folder: root-owned, group = the task user's, setgid so that what the service makes
# there keeps that group; no access for others.
install -d -m 0755 "$(dirname "$RUN_DIR")" "$(dirname "$LOG")"
install -d -o root -g "$GROUP" -m 2770 "$RUN_DIR"
SOCKET=$RUN_DIR/scheduler.sock
SERVE=("$VENV/bin/gpumr" scheduler serve --socket "$SOCKET" --socket-mode 660 --policy least-processes
       --lease-dir "$RUN_DIR/leases")

if [ "$SERVICE" = auto ]; then
  if [ -d /run/systemd/system ] && [ -z "$ROOT" ]; then SERVICE="systemd"; else SERVICE="nohup"; fi
fi
if [ "$SERVICE" = systemd ]; then
  cat > /etc/systemd/system/gpumr-scheduler.service <<EOF
[Unit]
Description=gpumr node-local GPU scheduler
After=network.target

[Service]
UMask=0007
ExecStart=${SERVE[*]}
Restart=on-failure
StandardOutput=append:$LOG
StandardError=append:$LOG

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload
  systemctl enable --now gpumr-scheduler.service
else
  (umask 007; nohup "${SERVE[@]}" >>"$LOG" 2>&1 </dev/null & echo $! >"$RUN_DIR/scheduler.pid")
fi

for _ in $(seq 50); do [ -S "$SOCKET" ] && break; sleep 0.2; done
[ -S "$SOCKET" ] || { say "the scheduler did not start; its log:"; tail -20 "$LOG" >&2; exit 1; }
say "scheduler serving on $SOCKET ($(stat -c '%A %U:%G' "$SOCKET")) under $SERVICE"
