#!/usr/bin/env bash
# libsharp_coll end to end (tests/libsharp/test_coll.c) over a fabric whose ANs
# speak shm (SHARP_AN_TRANSPORT=shm: the manager tells members, they
# connect by shared memory): every local case; the network-namespace cases
# need a network between hosts, which shared memory is not.
set -u
O=${O:-build}
exec env SHARP_AN_TRANSPORT=shm SHARP_TEST_NET=127.24 SHARP_TEST_ONLY='test_*' \
    "$O/tests/libsharp/test_coll"
