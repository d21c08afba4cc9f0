#!/usr/bin/python3
"""mpi4py + numpy, as a new user writes it: mpi4py initializes MPI at
MPI_THREAD_MULTIPLE.  Buffer collectives on the world and a duplicate,
every result checked (tests/mpi-coll/test_threads.sh).  Prints
"mpi_py: N calls, every result right" or the wrong ones, exit 1."""
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
dup = comm.Dup()
wrong = 0
calls = 0
for it in range(int(sys.argv[1]) if len(sys.argv) > 1 else 300):
    n = 1 + (it * 37) % 2000
    x = (np.arange(n, dtype=np.float64) + rank + it) % 97
    want = sum((np.arange(n, dtype=np.float64) + r + it) % 97 for r in range(size))
    y = np.empty_like(x)
    comm.Allreduce(x, y, op=MPI.SUM)
    wrong += not np.array_equal(y, want)
    z = np.empty_like(x)
    req = dup.Iallreduce(x, z, op=MPI.SUM)
    req.Wait()
    wrong += not np.array_equal(z, want)
    b = np.full(16, it if rank == it % size else -1, dtype=np.int32)
    comm.Bcast(b, root=it % size)
    wrong += not np.all(b == it)
    m = np.array([rank * it], dtype=np.int64)
    mx = np.empty_like(m)
    dup.Allreduce(m, mx, op=MPI.MAX)
    wrong += int(mx[0]) != (size - 1) * it
    comm.Barrier()
    calls += 5
total = comm.allreduce(wrong)
if rank == 0:
    if total == 0:
        print(f"mpi_py: {calls} calls, thread level {MPI.Query_thread()}, "
              "every result right", flush=True)
    else:
        print(f"mpi_py: {total} results WRONG", flush=True)
dup.Free()
sys.exit(1 if total else 0)
