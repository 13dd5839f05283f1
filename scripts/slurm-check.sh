#!/usr/bin/env bash
# The documented Slurm script against a real Slurm: starts a one-node Slurm on this machine from
# Debian's packages (munged, slurmctld and slurmd on localhost, 2 CPUs, all in a temporary
# folder with their own ports and munge socket, so nothing of the system's is touched),
# submits scripts/slurm/train-cpu.sbatch with 2 tasks on a small config, waits for it, checks
# that its 2 ranks trained exactly what one process with twice the grad_accum trains (the same
# losses, gradient norms and evaluations in metrics.jsonl and the same final model.safetensors,
# bit for bit; both with one thread per process), and stops the daemons it started.
#   scripts/slurm-check.sh [BUILD_DIR]        (default build; run from anywhere)
# Needs slurm-wlm and munge (scripts/install-deps.sh installs them, in ~10 s) and Open MPI.
# Exit: 0 when the runs agree, 1 otherwise; 77 when Slurm is not installed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
for tool in munged slurmctld slurmd sbatch sinfo mpirun; do
  command -v "$tool" > /dev/null || [ -x "/usr/sbin/$tool" ] ||
    { echo "skipped: $tool not found (scripts/install-deps.sh installs slurm-wlm, munge and Open MPI)"; exit 77; }
done
export PATH="$PATH:/usr/sbin"
tmp="$(mktemp -d /tmp/darkformer-slurm.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  [ -n "${DARK_SLURM_KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT

# munge: its own key, socket and files (munged refuses root without --force).
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool"
chmod 700 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
munged --force --foreground --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/socket" \
  --pid-file="$tmp/munge/pid" --log-file="$tmp/munge/log" --seed-file="$tmp/munge/seed" > "$tmp/munge/out" 2>&1 &
pids+=($!)

port=$((20000 + RANDOM % 20000))
cat > "$tmp/slurm.conf" <<EOF
ClusterName=darkformer-check
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
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
export SLURM_CONF="$tmp/slurm.conf"
for _ in $(seq 1 50); do [ -S "$tmp/munge/socket" ] && break; sleep 0.1; done
slurmctld -D -i -f "$SLURM_CONF" > "$tmp/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N darkformer-node -f "$SLURM_CONF" > "$tmp/slurmd.out" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 1 100); do
  state="$(sinfo -h -o %T 2> /dev/null || true)"
  [ "$state" = "idle" ] && break
  sleep 0.2
done
if [ "$state" != "idle" ]; then
  echo "FAILED: the one-node Slurm did not come up (node state '$state')"
  tail -n 20 "$tmp/slurmctld.log" "$tmp/slurmd.log" "$tmp/munge/log" 2> /dev/null
  exit 1
fi
echo "slurm-check: $(sinfo --version), node darkformer-node idle (2 CPUs), controller port $port"

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

python3 - "$tmp/slurm-2ranks" "$tmp/one-process" <<'PY'
import hashlib, json, pathlib, sys
TIMING = ("elapsed_s", "step_ms", "tokens_per_s", "comm_wait_ms", "peak_mem_mib")
def lines(run):
    out = []
    for line in open(pathlib.Path(run) / "metrics.jsonl"):
        row = json.loads(line)
        for key in TIMING:
            row.pop(key, None)
        out.append(row)
    return out
def weights(run):
    return hashlib.sha256((pathlib.Path(run) / "checkpoints/step_00000040/model.safetensors").read_bytes()).hexdigest()
a, b = lines(sys.argv[1]), lines(sys.argv[2])
same_lines = a == b
same_weights = weights(sys.argv[1]) == weights(sys.argv[2])
final = [r for r in a if "eval_loss" in r][-1]
print(f"slurm-check: 2 ranks under Slurm vs 1 process with grad_accum 2: metrics.jsonl {len(a)} lines "
      f"{'identical' if same_lines else 'DIFFERENT'}; final model.safetensors {'identical' if same_weights else 'DIFFERENT'}"
      f" (final val loss {final['eval_loss']:.6f})")
sys.exit(0 if same_lines and same_weights else 1)
PY
