#!/usr/bin/env bash
# The documented Slurm script against a real Slurm: starts a one-node Slurm on this machine from
# Debian's packages (munged, slurmctld and slurmd on localhost, 2 CPUs, all in a temporary
# folder with their own ports and munge socket, so nothing of the system's is touched),
# submits scripts/slurm/train-cpu.sbatch with 2 tasks on a small config, waits for it, checks
# that its 2 ranks trained exactly what one process with twice the grad_accum trains (the same
# losses, gradient norms and evaluations in metrics.jsonl and the same final model.safetensors,
# bit for bit, by scripts/same_run.py; both with one thread per process), and stops the daemons.
#   scripts/slurm-check.sh [BUILD_DIR]        (default build; run from anywhere)
# Runs as whoever calls it: the daemons run as that user (SlurmUser, SlurmdUser), as Slurm
# allows for a cluster of one user. They die with this script however it ends (a parent-death
# signal, setpriv --pdeathsig, so also under kill -9 or CTest's timeout: tested by
# tests/slurm_check_killed.sh), and a watchdog then removes the temporary folder. A port that
# turns out to be taken is retried with others.
# Needs slurm-wlm and munge (scripts/install-deps.sh installs them, in ~10 s), Open MPI and
# setpriv (util-linux).
# Exit: 0 when the runs agree, 1 otherwise; 77 when Slurm is not installed, or when its daemons
# cannot run as this (non-root) user on this machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
for tool in munged slurmctld slurmd sbatch sinfo mpirun setpriv; do
  command -v "$tool" > /dev/null || [ -x "/usr/sbin/$tool" ] ||
    { echo "skipped: $tool not found (scripts/install-deps.sh installs slurm-wlm, munge and Open MPI)"; exit 77; }
done
export PATH="$PATH:/usr/sbin"
user="$(id -un)"
tmp="$(mktemp -d /tmp/darkformer-slurm.XXXXXX)"
echo "slurm-check: folder $tmp, script pid $$"
# The watchdog: once this script is gone, however it ended, remove the folder. In a session of
# its own, so that a signal to this script's process group does not end it first.
if [ -z "${DARK_SLURM_KEEP:-}" ]; then
  setsid bash -c 'while kill -0 "$1" 2> /dev/null; do sleep 1; done; rm -rf "$2"' watchdog $$ "$tmp" \
    < /dev/null > /dev/null 2>&1 &
fi
munge_pid="" slurm_pids=()
# Each daemon runs in the foreground as a direct child of this script (`"${with_pdeath[@]}" CMD &`:
# setpriv sets the signal and execs CMD in the same process), and the kernel sends it SIGKILL
# when this script's process ends.
with_pdeath=(setpriv --pdeathsig KILL --)
stop_slurm() {
  for pid in "${slurm_pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${slurm_pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  slurm_pids=()
}
cleanup() {
  stop_slurm
  [ -n "$munge_pid" ] && { kill "$munge_pid" 2> /dev/null || true; wait "$munge_pid" 2> /dev/null || true; }
  [ -n "${DARK_SLURM_KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT

# munge: its own key, socket and files (munged refuses root without --force).
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool"
chmod 700 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
"${with_pdeath[@]}" munged --force --foreground --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/socket" \
  --pid-file="$tmp/munge/pid" --log-file="$tmp/munge/log" --seed-file="$tmp/munge/seed" > "$tmp/munge/out" 2>&1 &
munge_pid=$!
for _ in $(seq 1 50); do [ -S "$tmp/munge/socket" ] && break; sleep 0.1; done

# Two consecutive ports (controller, node daemon) that a bind finds free now.
free_ports() {
  python3 -c '
import random, socket
while True:
    port = random.randrange(20000, 60000)
    try:
        for p in (port, port + 1):
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))
        print(port)
        break
    except OSError:
        pass'
}
write_conf() {  # PORT
  cat > "$tmp/slurm.conf" <<EOF
ClusterName=darkformer-check
SlurmctldHost=localhost
SlurmUser=$user
SlurmdUser=$user
SlurmctldPort=$1
SlurmdPort=$(($1 + 1))
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
NodeName=darkformer-node NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=check Nodes=darkformer-node Default=YES MaxTime=INFINITE State=UP
EOF
}
export SLURM_CONF="$tmp/slurm.conf"
state="" port=""
for attempt in 1 2 3 4 5; do
  port="$(free_ports)"
  write_conf "$port"
  "${with_pdeath[@]}" slurmctld -D -i -f "$SLURM_CONF" > "$tmp/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  "${with_pdeath[@]}" slurmd -D -N darkformer-node -f "$SLURM_CONF" > "$tmp/slurmd.out" 2>&1 &
  slurm_pids+=($!)
  for _ in $(seq 1 100); do
    state="$(sinfo -h -o %T 2> /dev/null || true)"
    [ "$state" = "idle" ] && break
    sleep 0.2
  done
  [ "$state" = "idle" ] && break
  # A port taken between the check and the daemons' bind: stop them, try others.
  grep -qi "address already in use" "$tmp"/slurm*.log "$tmp"/slurm*.out 2> /dev/null || break
  echo "slurm-check: port $port or $((port + 1)) was taken; trying others (attempt $attempt)"
  stop_slurm
  rm -rf "$tmp/state" "$tmp"/slurm*.log "$tmp"/slurm*.out "$tmp"/slurm*.pid
  mkdir -p "$tmp/state"
done
if [ "$state" != "idle" ]; then
  tail -n 20 "$tmp/slurmctld.log" "$tmp/slurmd.log" "$tmp/munge/log" 2> /dev/null || true
  if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: the one-node Slurm did not come up as user $user (node state '$state'; its logs above)"
    exit 77
  fi
  echo "FAILED: the one-node Slurm did not come up (node state '$state')"
  exit 1
fi
echo "slurm-check: $(sinfo --version), node darkformer-node idle (2 CPUs), ports $port-$((port + 1)), user $user"

# A small run (the quickstart model at 40 steps on a tiny corpus), byte tokenizer, 1 thread.
mkdir -p "$tmp/corpus"
for d in 0 1 2 3; do
  for i in $(seq 1 50); do echo "Document $d line $i: ranks under Slurm train the same bits $((d * 100 + i))."; done \
    > "$tmp/corpus/doc$d.txt"
done
cat > "$tmp/check.json" <<EOF
{
  "model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128},
  "attention": {"kind": "performer", "num_features": 16},
  "data": {"tokenizer": "byte", "sources": ["$tmp/corpus"], "dir": "$tmp/data", "seq_len": 32, "val_windows": 4,
           "val_fraction": 0.25},
  "schedule": {"warmup_steps": 4},
  "training": {"steps": 40, "batch_size": 4, "eval_interval": 20, "eval_batches": 2, "checkpoint_interval": 40,
               "log_interval": 10, "generate_tokens": 0},
  "seed": 11
}
EOF
"$build/darkformer" prepare-data --config "$tmp/check.json" > "$tmp/prepare.log" 2>&1 || { cat "$tmp/prepare.log"; exit 1; }

# The documented script, as a user submits it (from the repository root), with 2 tasks.
cd "$root"
mkdir -p "$tmp/build"
ln -s "$build"/* "$tmp/build/"  # the script runs build/darkformer of its working directory
cd "$tmp"
ln -s "$root/scripts" scripts
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # as root (CI); a user's job needs neither
start=$(date +%s)
sbatch --wait --ntasks 2 --cpus-per-task 1 --output "$tmp/job.out" scripts/slurm/train-cpu.sbatch \
  "$tmp/check.json" --set output.dir="$tmp/slurm-2ranks" > "$tmp/sbatch.out" 2>&1 ||
  { cat "$tmp/sbatch.out" "$tmp/job.out"; echo "FAILED: the job failed"; exit 1; }
echo "slurm-check: $(cat "$tmp/sbatch.out"), $(($(date +%s) - start)) s; the job's output:"
grep -E "^darkformer-cpu:|data parallel:|done:" "$tmp/job.out" | sed 's/^/  | /' 
OMP_NUM_THREADS=1 "$build/darkformer" train --config "$tmp/check.json" --set training.grad_accum=2 \
  --set output.dir="$tmp/one-process" > "$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; exit 1; }

# The same bits: metrics.jsonl without what may differ between 2 ranks and one process (the
# timings, the wait for the all-reduce, the memory), every checkpoint file, and state.json but
# for the number of ranks, the gradient accumulation and the distributed section.
"$root/scripts/same_run.py" --ignore comm_wait_ms --ignore peak_mem_mib --ignore world_size \
  --ignore training.grad_accum --ignore distributed "$tmp/slurm-2ranks" "$tmp/one-process" | sed 's/^/slurm-check: /'
