#!/usr/bin/env bash
# No planted fault (core/plant.h) in a build that is not PLANT=1: no
# program or library of $O reads SHARP_PLANT.  (make check-partitions
# PLANT=1 builds them in build/plant/.)
set -u
O=${O:-build}
found=$(grep -l SHARP_PLANT "$O"/bin/* "$O"/lib/*.so* 2>/dev/null)
if [ -n "$found" ]; then
    echo "FAIL: planted faults compiled into: $found"
    exit 1
fi
n=$(ls "$O"/bin/* "$O"/lib/*.so* 2>/dev/null | wc -l)
[ "$n" -gt 0 ] || { echo "FAIL: nothing built in $O"; exit 1; }
echo "ok   none of the $n programs and libraries of $O has a planted fault"
