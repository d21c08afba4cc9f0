#!/usr/bin/env bash
# Runs libFuzzer harnesses one after the other (never in parallel) and
# prints one table: harness, seconds, executions, crashes, leaks, UB
# reports, corpus size; then a total line and whether the goal is met.
#
#   run-fuzz.sh SECONDS HARNESS...     (make fuzz FUZZ_SECONDS=...)
#
# Each harness starts from its corpus (FUZZ_O/corpus/NAME, kept between
# runs), its generated seeds (FUZZ_O/seeds/NAME) and the inputs that once
# broke it (tests/fuzz/regress/NAME), then fuzzes for SECONDS.  What it finds
# lands in FUZZ_O/artifacts/NAME/.  Exit 1 if anything was found.
# FUZZ_GOAL_EXECS (default 10000000): the total the goal line asks for.
set -u
cd "$(dirname "$0")/../.."
O=${FUZZ_O:-build/fuzz}
secs=${1:?usage: run-fuzz.sh SECONDS HARNESS...}
shift
goal=${FUZZ_GOAL_EXECS:-10000000}
tot_x=0 tot_c=0 tot_l=0 tot_u=0 tot_s=0
rows=()

for h in "$@"; do
    bin=$O/bin/fuzz_$h
    corpus=$O/corpus/$h
    art=$O/artifacts/$h
    log=$O/logs/$h.log
    mkdir -p "$corpus" "$art" "$(dirname "$log")"
    dirs=("$corpus" "$O/seeds/$h")
    [ -d "tests/fuzz/regress/$h" ] && dirs+=("tests/fuzz/regress/$h")
    before=$(ls "$art" | wc -l)
    start=$(date +%s)
    # one process, no workers: the machine is shared
    timeout -k 10 $((secs + 300)) "$bin" -max_total_time="$secs" \
        -print_final_stats=1 -artifact_prefix="$art/" -max_len=8192 \
        -timeout=10 -rss_limit_mb=2560 "${dirs[@]}" >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    execs=${execs:-0}
    new=$(ls -t "$art" | head -n $(($(ls "$art" | wc -l) - before)))
    leaks=$(grep -c '^leak-' <<<"$new")
    crashes=$(grep -Ec '^(crash|timeout|oom|slow-unit)-' <<<"$new")
    ub=$(grep -c 'runtime error:' "$log")
    if [ "$rc" -ne 0 ] && [ "$leaks" -eq 0 ] && [ "$crashes" -eq 0 ]; then
        crashes=1 # died without leaving an input (see the log)
    fi
    ncorp=$(ls "$corpus" | wc -l)
    rows+=("$(printf '%-8s %8s %12s %8s %6s %6s %8s' "$h" "$took" "$execs" \
        "$crashes" "$leaks" "$ub" "$ncorp")")
    tot_x=$((tot_x + execs)) tot_c=$((tot_c + crashes))
    tot_l=$((tot_l + leaks)) tot_u=$((tot_u + ub)) tot_s=$((tot_s + took))
    if [ "$crashes" -ne 0 ] || [ "$leaks" -ne 0 ] || [ "$ub" -ne 0 ]; then
        echo "fuzz: $h found something: $log, $art/" >&2
        grep -E 'ERROR:|runtime error:|check failed|SUMMARY' "$log" | head -5 >&2
    fi
done

printf '%-8s %8s %12s %8s %6s %6s %8s\n' harness seconds execs crashes leaks ub corpus
printf '%s\n' "${rows[@]}"
printf '%-8s %8s %12s %8s %6s %6s\n' total "$tot_s" "$tot_x" "$tot_c" "$tot_l" "$tot_u"
if [ "$tot_x" -ge "$goal" ] && [ $((tot_c + tot_l + tot_u)) -eq 0 ]; then
    echo "goal (>= $goal executions, 0 crashes, 0 leaks, 0 UB): met"
else
    echo "goal (>= $goal executions, 0 crashes, 0 leaks, 0 UB): not met"
fi
[ $((tot_c + tot_l + tot_u)) -eq 0 ]
