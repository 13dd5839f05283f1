#!/usr/bin/env bash
# Runs a command that must fail (a multi-rank job with a fault, see faults_main.cpp) and
# checks how: a non-zero exit, within SECONDS, with output (stdout and stderr) matching the
# extended regular expression REGEX. Prints the command's output, then what was wrong.
# usage: expect_failure.sh SECONDS REGEX command [args...]
set -uo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: expect_failure.sh SECONDS REGEX command [args...]" >&2
  exit 2
fi
limit="$1"
regex="$2"
shift 2
output="$(mktemp)"
trap 'rm -f "$output"' EXIT

start_ms=$(($(date +%s%N) / 1000000))
# A job that does not end is killed a little after the limit, so the checks below still run.
timeout --kill-after=5 "$((limit + 10))" "$@" > "$output" 2>&1
status=$?
elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
elapsed="$((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000)))"
cat "$output"
echo "---- expect_failure: exit status $status after ${elapsed} s (limit ${limit} s)"

failed=0
if [[ $status -eq 0 ]]; then
  echo "expect_failure: FAIL: the command succeeded; it must fail" >&2
  failed=1
fi
if ((elapsed_ms >= limit * 1000)); then
  echo "expect_failure: FAIL: it took ${elapsed} s, not under ${limit} s: a rank was left waiting" >&2
  failed=1
fi
if ! grep -Eq -- "$regex" "$output"; then
  echo "expect_failure: FAIL: no output line matches: $regex" >&2
  failed=1
fi
[[ $failed -eq 0 ]] && echo "expect_failure: ok (failed as it should, in ${elapsed} s, with the expected message)"
exit $failed
