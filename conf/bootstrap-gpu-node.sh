#!/usr/bin/env bash
# EMR bootstrap action for every node (run as root by mrjob's `bootstrap:` lines):
#   1. check (or make) the folders it writes in, and the environment whose Python it runs, trusting
#      none it finds: each must be a real folder (not a symlink), root's, and not writable by others
#      (see check_dir), and everything in the environment that root would run (bin/, bin/python and
#      where its links lead, site-packages) root's and writable by root alone (see check_tree): gpumr's
#      trusted-paths rule (gpumr/trusted.py) restated in shell, since it runs before any gpumr is
#      trusted; what it makes itself is made under umask 022;
#   2. install gpumr from its wheel (the first argument; mrjob uploads it) and its requirements
#      with pip (from PyPI: the node needs the internet, or GPUMR_PIP_OPTS naming a wheelhouse)
#      into a virtual environment of the node's system Python (3.9+: EMR 7.x on Amazon Linux 2023);
#   3. on a node with an NVIDIA driver (nvidia-smi), add CuPy (binary wheels, no CUDA toolkit
#      needed) so that map tasks can launch gpumr's kernels;
#   4. start the node-local GPU scheduler service, its socket reachable by the YARN task user's
#      group only (folder root:$GROUP 2750, socket 660; lease folder root:$GROUP 3770, umask 007:
#      the group makes its lock files there, and the sticky bit keeps any member from removing or
#      replacing another's, as gpumr's rule for a shared folder asks),
#      and succeed only once the process it started answers there (by the socket's peer
#      credentials, not by what a reply says). Run again, it stops the service it started before
#      (the pid its pid file names, if that pid serves the socket) and starts the new install's.
#
# usage: bootstrap-gpu-node.sh gpumr-X-py3-none-any.whl   (or an sdist, gpumr-X.tar.gz)
#   gpumr run ... --engine emr builds the wheel of the gpumr it runs and names it here (gpumr's
#   packaged mrjob.emr.conf); a copy written by `gpumr conf mrjob.emr.conf -o FILE --package WHEEL`
#   names the wheel given.
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
umask 022  # what it makes (the environment, the unit, its stamp) is root's alone to change

PACKAGE=${1:?usage: bootstrap-gpu-node.sh gpumr-X-py3-none-any.whl}
ROOT=${GPUMR_ROOT:-}
VENV=${GPUMR_VENV:-$ROOT/opt/gpumr/venv}
RUN_DIR=${GPUMR_RUN_DIR:-$ROOT/run/gpumr}
LOG=${GPUMR_LOG:-$ROOT/var/log/gpumr-scheduler.log}
GROUP=${GPUMR_GROUP:-hadoop}
GPU=${GPUMR_GPU:-auto}
SERVICE=${GPUMR_SERVICE:-auto}
PYTHON=${PYTHON:-python3}
read -r -a PIP_OPTS <<< "${GPUMR_PIP_OPTS:-}"
UNIT=$ROOT/etc/systemd/system/gpumr-scheduler.service
SOCKET=$RUN_DIR/scheduler.sock
PIDFILE=$RUN_DIR/scheduler.pid
LEASES=$RUN_DIR/leases
GPUMR=$VENV/bin/gpumr

say() { echo "gpumr bootstrap: $*" >&2; }
fail() { say "$*"; exit 1; }

# check_dir DIR [shared]: refuse a folder that this root-run script would otherwise trust blindly:
# a symlink (what is written in it would land where the link points), a folder of another user
# (they made it, they can change it), or one others may write in (they could swap what it holds
# between a check and a use). A shared folder (the group's) may be group-writable, never
# world-writable. A missing folder passes: the script makes it.
check_dir() {
  local dir=$1 uid mode forbid=8#022
  [ "${2:-}" = shared ] && forbid=8#002
  [ -L "$dir" ] && fail "$dir: is a symlink; refusing to use it (remove it: the bootstrap makes this folder itself)"
  [ -e "$dir" ] || return 0
  [ -d "$dir" ] || fail "$dir: exists and is not a folder; refusing to use it"
  read -r uid mode < <(stat -c '%u %a' -- "$dir")
  [ "$uid" -eq "$EUID" ] || fail "$dir: belongs to uid $uid, not to root; refusing to use it (someone else made it)"
  (( (8#$mode & forbid) == 0 )) || fail "$dir: mode $mode lets others write in it; refusing to use it"
}

# check_tree DIR: what root would run from the environment DIR: every folder, file and link in it must
# be root's, and nothing in it (links aside: a link's own mode means nothing) writable by group or others;
# where a link leads (bin/python -> the system's Python) must be root's and not writable by others, and so
# must the folder holding it. Anything else could have been put there, or changed, by someone else.
check_tree() {
  local found link target uid mode p
  found=$(find "$1" \( ! -uid 0 -o \( ! -type l -perm /022 \) \) -print -quit) \
    || fail "$1: cannot look through it; refusing to run anything from it"
  if [ -n "$found" ]; then
    read -r uid mode < <(stat -c '%u %a' -- "$found")
    [ "$uid" -eq 0 ] || fail "$found: belongs to uid $uid, not to root; refusing to run anything from $1"
    fail "$found: mode $mode lets others write in it; refusing to run anything from $1"
  fi
  while IFS= read -r -d '' link; do
    target=$(readlink -f -- "$link") || fail "$link: leads nowhere; refusing to run anything from $1"
    for p in "$target" "$(dirname "$target")"; do
      read -r uid mode < <(stat -c '%u %a' -- "$p")
      [ "$uid" -eq 0 ] || fail "$link: leads to $p, which belongs to uid $uid, not to root; refusing to run it"
      (( (8#$mode & 8#022) == 0 )) || fail "$link: leads to $p, whose mode $mode lets others write in it; refusing to run it"
    done
  done < <(find "$1" -type l -print0)
}

# own_dir DIR MODE: a folder of gpumr's: check its parent and it, then make it root:$GROUP with MODE
# (or set them on the folder found).
own_dir() {
  check_dir "$(dirname "$1")"
  check_dir "$1" shared
  install -d -o root -g "$GROUP" -m "$2" "$1"
}

# system_dir DIR: a folder of the system that the script writes a file in: check it, make it if missing
# (never change one found).
system_dir() {
  check_dir "$1"
  [ -d "$1" ] || install -d -m 0755 "$1"
}

# write_file PATH < CONTENT: atomically through gpumr's one helper (a link at PATH is replaced, not followed).
write_file() {
  "$VENV/bin/python" -c 'import sys; from seqfile.atomic import write_bytes; write_bytes(sys.argv[1], sys.stdin.buffer.read())' "$1"
}

# running PID: whether PID runs (a zombie nobody has reaped yet has stopped).
running() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) }
  [ "${st%% *}" != Z ]
}

# serves PID: whether process PID answers on the socket (peer credentials of the connection).
serves() { "$GPUMR" scheduler status --socket "$SOCKET" --expect-pid "$1" >/dev/null 2>&1; }

[ "$EUID" -eq 0 ] || fail "run it as root (EMR runs bootstrap actions with sudo): it makes root-owned folders"
case $GPU in auto|yes|no) ;; *) fail "GPUMR_GPU=$GPU: expected auto, yes or no" ;; esac
case $SERVICE in auto|systemd|nohup) ;; *) fail "GPUMR_SERVICE=$SERVICE: expected auto, systemd or nohup" ;; esac
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 9))' \
  || fail "$PYTHON is older than 3.9: gpumr does not install there (use EMR 7.x)"
getent group "$GROUP" >/dev/null || fail "no group $GROUP on this node (set GPUMR_GROUP)"

# The folders first, so that a refusal costs nothing. The environment (and the two folders above
# it, which python -m venv makes if missing): root runs its Python and its gpumr, so one found there
# must be root's alone, as check_dir says. The socket's folder: root's, group = the task
# user's, setgid so that the socket keeps that group; the group may enter and connect, not add or
# replace anything. The leases' folder in it: the group makes its lock files there, and the sticky bit
# keeps each member's lock files from the others (a FIFO planted under a free name is refused by gpumr).
check_dir "$(dirname "$(dirname "$VENV")")"
check_dir "$(dirname "$VENV")"
check_dir "$VENV"
[ ! -e "$VENV" ] || check_tree "$VENV"
own_dir "$RUN_DIR" 2750
own_dir "$LEASES" 3770
system_dir "$(dirname "$LOG")"
[ -L "$LOG" ] && fail "$LOG: is a symlink; refusing to write the log through it"
[ ! -e "$LOG" ] || [ -f "$LOG" ] || fail "$LOG: exists and is not a plain file; refusing to write the log there"

# Run again with the same package (its SHA-256 recorded in the environment), nothing is reinstalled.
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
STAMP=$VENV/gpumr-package.sha256
digest=$(sha256sum < "$PACKAGE")
digest=${digest%% *}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$digest" ] && "$GPUMR" --version >/dev/null 2>&1; then
  say "$("$GPUMR" --version) from this package is already installed in $VENV"
else
  "$VENV/bin/python" -m pip install --quiet "${PIP_OPTS[@]}" "$PACKAGE"
  echo "$digest" | write_file "$STAMP"
  say "installed $("$GPUMR" --version) in $VENV"
fi

if [ "$GPU" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then GPU=yes; else GPU=no; fi
fi
if [ "$GPU" = yes ]; then
  "$VENV/bin/python" -m pip install --quiet "${PIP_OPTS[@]}" cupy-cuda12x \
    || say "CuPy did not install: GPU path disabled, the CPU path is unaffected"
fi

SERVE=("$GPUMR" scheduler serve --socket "$SOCKET" --socket-mode 660 --policy least-processes --lease-dir "$LEASES")
if [ "$SERVICE" = auto ]; then
  if [ -d /run/systemd/system ] && [ -z "$ROOT" ]; then SERVICE="systemd"; else SERVICE="nohup"; fi
fi
if [ "$SERVICE" = systemd ]; then
  system_dir "$(dirname "$UNIT")"
  write_file "$UNIT" <<EOF
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
  systemctl enable gpumr-scheduler.service
  systemctl restart gpumr-scheduler.service  # a running one is replaced by the new install's
  service_pid() { systemctl show -p MainPID --value gpumr-scheduler.service; }
else
  # The service an earlier run started: the pid its pid file names, if that process serves the socket.
  earlier=""
  if [ -f "$PIDFILE" ] && [ ! -L "$PIDFILE" ]; then read -r earlier < "$PIDFILE" || true; fi
  if [[ $earlier =~ ^[0-9]+$ ]] && serves "$earlier"; then
    kill -TERM "$earlier"
    for _ in $(seq 100); do running "$earlier" || break; sleep 0.1; done
    running "$earlier" && fail "the earlier scheduler (pid $earlier) did not stop within 10 s of SIGTERM"
    say "stopped the earlier scheduler (pid $earlier)"
  fi
  # umask 007: what the service makes (its pid file, lock files) is the group's at most. The service
  # writes its pid file itself once it answers (atomically: a link there is replaced, not followed).
  ( umask 007; exec nohup "${SERVE[@]}" --pid-file "$PIDFILE" >>"$LOG" 2>&1 </dev/null ) &
  started=$!
  service_pid() { echo "$started"; }
fi

pid=""
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
  candidate=$(service_pid)
  if [ "${candidate:-0}" != 0 ] && serves "$candidate"; then pid=$candidate; break; fi
  if [ "$SERVICE" = nohup ] && ! running "$started"; then
    fail "the scheduler did not start: $(tail -n 1 "$LOG")"
  fi
  sleep 0.5
done
if [ -z "$pid" ]; then
  if [ "$SERVICE" = nohup ]; then kill -TERM "$started" 2>/dev/null || true; fi
  fail "the scheduler it started did not answer on $SOCKET within 60 s (its log: $LOG)"
fi
say "scheduler serving on $SOCKET ($(stat -c '%A %U:%G' "$SOCKET")) under $SERVICE, pid $pid"
