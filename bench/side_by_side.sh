#!/usr/bin/env bash
# The payments, refunds and payouts benchmarks for two commits, alternated in one run
# (old, new, old, new ...), so that both see the same machine noise (bench/README.md).
#
#   bench/side_by_side.sh OLD_REV [ROUNDS]      e.g. bench/side_by_side.sh be5a699 2
#
# OLD_REV is checked out in a temporary git worktree; each benchmark runs from its own tree
# (that tree's script, `src` first on PYTHONPATH, so `paycore` subprocesses run that tree's
# code too) with this checkout's .venv. Reports go to bench/results/side-by-side-<time>/,
# one file per commit, benchmark and round. BENCH_ARGS_<NAME> override each script's options.
set -euo pipefail
cd "$(dirname "$0")/.."
old_rev="${1:?usage: bench/side_by_side.sh OLD_REV [ROUNDS]}"
rounds="${2:-2}"
new_tree="$PWD"
old_tree="$(mktemp -d)/old"
out="bench/results/side-by-side-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
git worktree add --quiet --detach "$old_tree" "$old_rev"
trap 'git worktree remove --force "$old_tree"' EXIT
new_rev="$(git rev-parse --short HEAD)"
old_short="$(git -C "$old_tree" rev-parse --short HEAD)"
payments_args=${BENCH_ARGS_PAYMENTS:-"--seconds 10 --repeat 1 --lost 10"}
refunds_args=${BENCH_ARGS_REFUNDS:-"--seconds 8 --repeat 1"}
payouts_args=${BENCH_ARGS_PAYOUTS:-"--payouts 1000 --workers 1,2 --repeat 1"}
echo "old $old_short ($old_tree), new $new_rev ($new_tree); $rounds rounds; reports in $out" >&2
for round in $(seq 1 "$rounds"); do
  for bench in payments refunds payouts; do
    args_var="${bench}_args"
    for side in old new; do
      tree="$old_tree"; rev="$old_short"
      if [ "$side" = new ]; then tree="$new_tree"; rev="$new_rev"; fi
      report="$out/${bench}-${side}-${rev}-round${round}.md"
      echo "round $round: $bench, $side ($rev)" >&2
      script="bench/${bench}_bench.py"  # the refunds' script was renamed; an older tree has the old name
      if [ "$bench" = refunds ] && [ -f "$tree/bench/refunds_hot_payment_bench.py" ]; then
        script=bench/refunds_hot_payment_bench.py
      fi
      # shellcheck disable=SC2086
      (cd "$tree" && PYTHONPATH="$tree/src" "$new_tree/.venv/bin/python" "$script" ${!args_var}) \
        > "$report" 2> "$report.log" || echo "  FAILED: see $report.log" >&2
    done
  done
done
echo "done: $out" >&2
