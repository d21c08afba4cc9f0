#!/usr/bin/env bash
# The verbs transport's tests inside a soft-RoCE qemu guest; skipped (77)
# with the reason where no guest can be had.
O=${O:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
exec "$HERE/rxe-run.sh" "$O/tests/verbs/test_verbs"
