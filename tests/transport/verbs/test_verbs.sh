#!/usr/bin/env bash
# The verbs tests inside a soft-RoCE qemu guest, in one boot: the provider's
# own test, the 2-level aggregation tree of real processes
# (tests/an/test_an_tree) over verbs, then libsharp_coll over a fabric of
# verbs ANs, results by RC and by UD multicast (coll_verbs.sh).  Skipped
# (77) with the reason where no guest can be had.
O=${O:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
exec "$HERE/rxe-run.sh" sh -c "$O/tests/transport/verbs/test_verbs && \
SHARP_TEST_TRANSPORT=verbs SHARP_TEST_IP=\$SHARP_RXE_IP $O/tests/an/test_an_tree && \
O=$O $HERE/coll_verbs.sh"
