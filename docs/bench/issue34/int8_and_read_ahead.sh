#!/usr/bin/env bash
# Issue 34 on the lent GPU machine in one call of at most TOTAL_S seconds (default 480), repo root, .whl4 carried:
# 1. int8_words.sh without its probe: the int8 GPU tests, then `holodesk bench --quant 8bit` as main chooses and
#    without the int8-words tiles (the baseline), same machine;
# 2. the cold start (`holodesk bench --cold-start`, full-size random checkpoint written to /var/tmp, page cache
#    dropped with drop_caches) with the weights read ahead during the imports, as load_local_policy does: a warm
#    process first (it compiles every kernel and writes the bytecode), then a cold one;
# 3. the same checkpoint, one cold process with --no-read-ahead (the baseline).
# Ran as run 24 at main 2ea723e; the read-ahead and its --no-read-ahead flag were removed after it (benchmarks.md).
# Bytecode is written for the cold-start processes, as an installed Holodesk has it (gpu-session.sh, coldstart).
#   bash docs/bench/issue34/int8_and_read_ahead.sh OUT
set -u
out=${1:?usage: int8_and_read_ahead.sh OUT}
mkdir -p "$out"
deadline=$(( $(date +%s) + ${TOTAL_S:-480} ))
left() { echo $(( deadline - $(date +%s) - $1 )); }  # seconds to the deadline, less a reserve
TESTS_S=${TESTS_S:-100} PROBE_S=0 BENCH_S=${BENCH_S:-100} bash docs/bench/issue34/int8_words.sh "$out/int8"
export PYTHONPATH=/tmp/site:app PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
cold() {  # cold SECONDS NAME ARGS
    local s=$1 name=$2
    [ "$s" -lt 30 ] && { echo "== cold start $name: not run ($s s left)"; return; }
    echo "== cold start $name (at most $s s)"
    timeout "$s" python3 -c 'import sys; from holodesk.bench.cli import main; sys.exit(main(sys.argv[1:]))' \
        --cold-start --cold-start-dir /var/tmp/holodesk-cold-start --cold-start-steps 1 "${@:3}" \
        --json "$out/cold-start-$name.json" 2>&1 | grep -v "Warning\|warn(" | cut -c1-1400 | tee "$out/cold-start-$name.log"
}
cold "$(left 75)" read-ahead --cold-start-runs warm,cold
cold "$(left 3)" no-read-ahead --cold-start-runs cold --no-read-ahead
