#!/usr/bin/env bash
# scripts/slurm-check.sh leaves nothing behind however it ends: started, killed with SIGKILL
# once its one-node Slurm is up (no EXIT trap runs then, as under CTest's timeout), its daemons
# (munged, slurmctld, slurmd) must be gone within seconds and its temporary folder soon after.
# usage: slurm_check_killed.sh BUILD_DIR [SLURM_CHECK_SCRIPT]   (exit 77 where Slurm is missing)
set -euo pipefail
build="$1"
script="${2:-$(cd "$(dirname "$0")/.." && pwd)/scripts/slurm-check.sh}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
bash "$script" "$build" > "$out" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  grep -q "idle" "$out" && break
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
done
if ! grep -q "idle" "$out"; then
  wait "$pid" && code=0 || code=$?
  cat "$out"
  [ "$code" -eq 77 ] && exit 77
  echo "FAILED: slurm-check.sh did not bring its Slurm up (exit $code)"
  exit 1
fi
folder="$(sed -n 's/^slurm-check: folder \([^,]*\),.*/\1/p' "$out")"
[ -n "$folder" ] || { cat "$out"; echo "FAILED: no 'folder' line"; exit 1; }
daemons() { pgrep -f -- "$folder" | grep -vx "$pid" || true; }  # munged, slurmctld, slurmd (their arguments name it)
before="$(daemons | wc -l)"
echo "slurm-check.sh (pid $pid) is up in $folder with $before daemon process(es); kill -9"
[ "$before" -ge 3 ] || { ps -ef | grep -- "$folder" | grep -v grep; echo "FAILED: expected munged, slurmctld, slurmd"; exit 1; }
kill -9 "$pid"
wait "$pid" 2> /dev/null || true
left=""
for _ in $(seq 1 50); do
  left="$(daemons)"
  [ -z "$left" ] && break
  sleep 0.1
done
if [ -n "$left" ]; then
  ps -o pid,args -p $(echo $left | tr ' ' ',')
  kill -9 $left 2> /dev/null || true
  echo "FAILED: daemons outlived the killed script"
  exit 1
fi
for _ in $(seq 1 50); do
  [ -e "$folder" ] || break
  sleep 0.1
done
[ -e "$folder" ] && { rm -rf "$folder"; echo "FAILED: $folder outlived the killed script"; exit 1; }
echo "OK: the daemons died with the script and its folder is gone"
