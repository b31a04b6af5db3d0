#!/usr/bin/env bash
# A one-node SLURM on this machine, for tests/test_slurm.py and CI (.ci/run starts it before the suite).
#
#   tests/slurm/up.sh           start it, or find it running: one line says which
#   tests/slurm/up.sh --stop    stop its daemons (the packages and its slurm.conf stay)
#
# Debian's slurm-wlm (22.05) and munge, installed with apt-get where missing; munged runs as the munge
# user, slurmctld and slurmd on localhost as root (SlurmUser=root, proctrack/linuxproc, task/none,
# select/cons_tres: no cgroups, no systemd needed). One node, its CPUs and memory as slurmd -C finds
# them, in one partition `debug`. The daemons log to /var/log/slurm/ and keep their state in
# /var/lib/slurm/; each start forgets the jobs of an earlier one (slurmctld -c).
#
# It writes /etc/slurm/slurm.conf only where there is none or the one there is its own (first line
# below): another SLURM's configuration is left alone, and this script then says so and does nothing.
#
# Exit status: 0 running; 77 SLURM cannot run here (not root, no apt-get, the packages will not
# install, a slurm.conf that is not ours): the line says why, and the tests skip with it (fail under
# CI=true); 1 it failed to start: the line names the log to read.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
MARK="# made by gpumr's tests/slurm/up.sh: a one-node SLURM on localhost for gpumr's tests"
LOGS=/var/log/slurm
CANNOT=77

say() { echo "slurm: $*"; }
cannot() { say "$*"; exit "$CANNOT"; }
failed() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || cannot "not started: this one-node SLURM runs its daemons as root, and this is $(id -un)"
if [ -e "$CONF" ] && [ "$(head -n 1 "$CONF")" != "$MARK" ]; then
  cannot "not started: $CONF is another SLURM's configuration (not made by this script), left as it is"
fi

# One call at a time (two test runs starting it at once would each start daemons); the daemons do not inherit it.
exec 9>/run/gpumr-slurm-up.lock
flock -w 120 9 || failed "another tests/slurm/up.sh has held /run/gpumr-slurm-up.lock for 2 minutes"

# A daemon runs: its pid file names a live process of that name (a pid reused by another program is not it, nor
# a killed daemon that no one has reaped yet).
alive() {
  local pid
  pid=$(cat "/run/$1.pid" 2>/dev/null) && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "${1##*/}" ] \
    && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}
munge_answers() { command -v munge >/dev/null && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
node_state() { sinfo -h -N -o %T 2>/dev/null | head -n 1; }

stop_slurm() {
  local d pid
  for d in slurmd slurmctld; do
    if alive "$d"; then
      pid=$(cat "/run/$d.pid")
      kill "$pid"
      for _ in $(seq 100); do alive "$d" || break; sleep 0.1; done
      ! alive "$d" || failed "$d (pid $pid) did not stop within 10 s"
      stopped+=("$d")
    fi
  done
}

if [ "${1:-}" = --stop ]; then
  stopped=()
  [ -e "$CONF" ] && stop_slurm
  if munge_answers && alive munge/munged; then
    runuser -u munge -- munged --stop >/dev/null 2>&1 || failed "munged --stop failed"
    stopped+=(munged)
  fi
  if [ ${#stopped[@]} -gt 0 ]; then say "stopped ${stopped[*]}"; else say "was not running"; fi
  exit 0
elif [ $# -gt 0 ]; then
  echo "usage: $0 [--stop]" >&2
  exit 2
fi

if munge_answers && alive slurmctld && alive slurmd && [[ "$(node_state)" =~ ^(idle|mixed|allocated)$ ]]; then
  say "already running: node $(hostname -s) $(node_state) in partition debug ($CONF)"
  exit 0
fi

t0=$SECONDS
did=()
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
   || ! command -v munged >/dev/null; then
  command -v apt-get >/dev/null || cannot "not started: slurm-wlm and munge are not installed and there is no apt-get"
  log=$(mktemp -t gpumr-slurm-apt.XXXXXX)
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           slurm-wlm munge; } >"$log" 2>&1; then
    cannot "not started: apt-get could not install slurm-wlm and munge: $(grep -E '^(E|W):' "$log" | tail -n 1)"
  fi
  rm -f "$log"
  did+=("installed slurm-wlm and munge ($((SECONDS - t0)) s)")
fi

if ! munge_answers; then
  [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- munged 9>&- || failed "munged did not start: see /var/log/munge/munged.log"
  for _ in $(seq 50); do munge_answers && break; sleep 0.1; done
  munge_answers || failed "munged started but does not answer: see /var/log/munge/munged.log"
  did+=("started munged")
fi

# A start over a half-running one: stop what runs, then start both afresh with this machine's sizes.
stopped=()
stop_slurm
node=$(hostname -s)
sizes=$(slurmd -C | sed -n "s/^NodeName=[^ ]* //p")
[ -n "$sizes" ] || failed "slurmd -C did not say this machine's CPUs and memory"
install -d -m 0755 /etc/slurm "$LOGS" /var/lib/slurm/slurmctld /var/lib/slurm/slurmd
tmp=$(mktemp "$CONF.XXXXXX")
cat >"$tmp" <<EOF
$MARK
# (tests/slurm/up.sh rewrites it at each start; remove it together with the packages.)
ClusterName=gpumr
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=10
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
NodeName=$node NodeAddr=127.0.0.1 $sizes State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
chmod 0644 "$tmp"
mv -f "$tmp" "$CONF"

slurmctld -c 9>&- || failed "slurmctld did not start: see $LOGS/slurmctld.log"
slurmd 9>&- || failed "slurmd did not start: see $LOGS/slurmd.log"
for _ in $(seq 300); do
  [[ "$(node_state)" =~ ^(idle|mixed|allocated)$ ]] && break
  sleep 0.1
done
state=$(node_state)
[[ "$state" =~ ^(idle|mixed|allocated)$ ]] || failed "node $node is '${state:-unknown}' after 30 s: see $LOGS/slurmctld.log and $LOGS/slurmd.log"
cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$sizes") mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$sizes")
did+=("started slurmctld and slurmd: node $node ($cpus CPUs, $mem MB) $state in partition debug")
summary=$(printf '%s; ' "${did[@]}")
say "${summary%; } in $((SECONDS - t0)) s ($CONF)"
