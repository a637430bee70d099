#!/usr/bin/env bash
# Starts a throw-away one-node Slurm cluster (munged, slurmctld, slurmd) in a
# temporary directory, runs `srun -n NTASKS --overcommit COMMAND...` on it,
# then stops the daemons it started. Used by test_srun (label slow).
#
#   tests/comm/slurm_one_node.sh 8 tripod bench comm --check
set -u
ntasks=$1; shift
dir=$(mktemp -d /tmp/tripod_slurm.XXXXXX)
host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
started_munge=""
cleanup() {
  for f in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
    [[ -s $f ]] && kill "$(cat "$f")" 2>/dev/null
  done
  [[ -n $started_munge && -s /run/munge/munged.pid ]] && kill "$(cat /run/munge/munged.pid)" 2>/dev/null
  sleep 0.5
  rm -rf "$dir"
}
trap cleanup EXIT

for tool in munged slurmctld slurmd srun; do
  command -v $tool >/dev/null || [[ -x /usr/sbin/$tool ]] || { echo "SKIP: $tool not installed (apt-get install slurm-wlm munge)"; exit 77; }
done
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged --force || { echo "cannot start munged"; exit 1; }
  started_munge=1
fi
mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" <<CONF
ClusterName=tripodtest
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
MpiDefault=none
ReturnToService=2
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:$ntasks
CONF
export SLURM_CONF=$dir/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF" || { cat "$dir/slurmctld.log"; exit 1; }
/usr/sbin/slurmd -f "$SLURM_CONF" || { cat "$dir/slurmd.log"; exit 1; }
for _ in $(seq 1 100); do
  [[ $(sinfo -h -o %t 2>/dev/null) == idle* ]] && break
  sleep 0.1
done
srun -n "$ntasks" --overcommit "$@"
