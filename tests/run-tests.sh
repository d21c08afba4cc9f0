#!/usr/bin/env bash
# Runs test programs and scripts; exit 0 pass, 77 skip (with a reason on
# stdout/stderr), anything else fail.  Sums cmocka's per-binary counts and
# ends with one line: "check: N passed, N failed, N skipped".
set -u
passed=0 failed=0 skipped=0
failed_names=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in "$@"; do
    echo "=== $t"
    start=$(date +%s)
    "$t" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    secs=$(( $(date +%s) - start ))
    # cmocka: "[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s), listed below:"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END{print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END{print s+0}')
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END{print s+0}')
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then
        # not a cmocka binary: the whole program is one test
        case $rc in
            0) p=1 ;;
            77) s=1 ;;
            *) f=1 ;;
        esac
    elif [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ "$f" -eq 0 ]; then
        f=1 # crashed after its last summary line
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        failed_names+=("$t (exit $rc)")
    fi
    echo "=== $t: exit $rc, ${secs}s"
done

echo
if [ ${#failed_names[@]} -gt 0 ]; then
    echo "failed:"
    printf '  %s\n' "${failed_names[@]}"
fi
echo "check: $passed passed, $failed failed, $skipped skipped"
[ ${#failed_names[@]} -eq 0 ] && [ "$failed" -eq 0 ]
