#!/bin/bash
# Replay every committed diagnosis benchmark run on this tree's code and on another tree's (e.g. a
# detached worktree of main), and say whether each run's verdict lines are the same on both.
#     git worktree add --detach /tmp/gd-main main
#     benchmarks/replay_against.sh /tmp/gd-main results/replay-check-<UTC>
# No model runs: a replay answers every LM call from the run's transcript.jsonl.
set -u
other=$(realpath "$1"); out=$(realpath -m "$2"); here=$(realpath "$(dirname "$0")/..")
python=$here/.venv/bin/python
mkdir -p "$out"
for run in "$here"/results/bench-*; do
  name=$(basename "$run")
  (cd "$other" && PYTHONPATH="$other" "$python" benchmarks/diagnosis_time.py --replay "$run" > "$out/$name.other" 2>&1)
  (cd "$here" && "$python" benchmarks/diagnosis_time.py --replay "$run" > "$out/$name.here" 2>&1)
  pick() { grep -E '^\[|^replay reproduces' "$1"; }
  same=$([ "$(pick "$out/$name.other")" = "$(pick "$out/$name.here")" ] && echo same || echo DIFFERENT)
  echo "$name: other tree $(grep -o 'verdict: [A-Za-z]*' "$out/$name.other"), this tree $(grep -o 'verdict: [A-Za-z]*' "$out/$name.here"); verdict lines $same"
done | tee "$out/summary.txt"
