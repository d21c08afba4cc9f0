#!/usr/bin/env bash
# The aggregation-node tree test (tests/an/test_an_tree.c) with every AN and
# member speaking the shm transport: the same cases as over tcp but the one
# that writes raw bytes on a TCP socket (the shm transport's own bad-input
# cases are in tests/transport/test_transport.c).
set -u
O=${O:-build}
exec env SHARP_TEST_TRANSPORT=shm "$O/tests/an/test_an_tree"
