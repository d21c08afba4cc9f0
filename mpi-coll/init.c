/*
 * libsharp_mpi: MPI_Allreduce, MPI_Reduce, MPI_Barrier and MPI_Bcast, their
 * non-blocking and persistent forms, over sharp, through the PMPI profiling
 * interface.  Built once per MPI (Open MPI, MPICH) from the files of this
 * folder (what they share: sharp_mpi_int.h; mpi-coll/README.md says which
 * does what); preloaded (LD_PRELOAD) or linked, so neither the program nor
 * the MPI library is rebuilt.
 *
 * This file starts and ends the layer:
 *
 *   MPI_Init / MPI_Init_thread   sharp_coll_init over MPI_COMM_WORLD, the
 *                                out-of-band collectives written on PMPI;
 *                                the job's id, the recovery services' key
 *                                and SHARP_MPI_ON_FAULT agreed from rank 0;
 *                                every process's recovery service known;
 *                                the world's group (comm.c)
 *   MPI_Finalize                 operations in flight completed, groups
 *                                destroyed, job ended, report
 *
 * A job whose ranks cannot all have sharp (no sharpd, the job refused,
 * SHARP_MPI_ENABLE=0, MPI_THREAD_MULTIPLE with SHARP_MPI_THREAD_MULTIPLE=0)
 * runs on plain MPI, the reason named (why.c).
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "mpi-coll/recover.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Out-of-band collectives on PMPI ------------------------------------------ */

static int oob_bcast(void *ctx, void *buf, int len, int root)
{
    return PMPI_Bcast(buf, len, MPI_BYTE, root, *(MPI_Comm *)ctx) == MPI_SUCCESS
               ? 0
               : -1;
}

static int oob_barrier(void *ctx)
{
    return PMPI_Barrier(*(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : -1;
}

static int oob_gather(void *ctx, int root, void *sbuf, void *rbuf, int len)
{
    return PMPI_Gather(sbuf, len, MPI_BYTE, rbuf, len, MPI_BYTE, root,
                       *(MPI_Comm *)ctx) == MPI_SUCCESS
               ? 0
               : -1;
}

/* Init and finalize ------------------------------------------------------------ */

/* every process's recovery service, known to every process (collective
 * over the world); off when any process cannot run one */
static void recovery_setup(int size, const unsigned char *key, int have_key)
{
    smr_addr_t me;
    int ok = 1, all = 0;
    memset(&me, 0, sizeof(me));
    if (!have_key) {
        smpi_note(1, "no recovery service (rank 0 drew no key)");
        ok = 0;
    } else if (smr_start(getenv("SHARP_COLL_LOCAL_IP"), key, &me) != 0) {
        smpi_note(1, "no recovery service (%s)", strerror(errno));
        ok = 0;
    }
    smpi.addrs = calloc((size_t)size, sizeof(*smpi.addrs));
    if (smpi.addrs == NULL) {
        ok = 0;
    }
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, smpi.oob_world);
    if (all) {
        PMPI_Allgather(&me, (int)sizeof(me), MPI_BYTE, smpi.addrs,
                       (int)sizeof(me), MPI_BYTE, smpi.oob_world);
        smpi.svc = 1;
        return;
    }
    smr_stop();
    free(smpi.addrs);
    smpi.addrs = NULL;
    if (smpi.rank == 0) {
        smpi_note(1,
                  "SHARP_MPI_ON_FAULT=fallback unavailable: a failure in the "
                  "network will abort the job");
    }
}

/* Rank 0's job id (unique on the fabric: its host, pid and clock), a key
 * for the recovery services (key: SMR_KEY_LEN random bytes; *have_key 0
 * if rank 0 could not draw them) and its SHARP_MPI_ON_FAULT (one policy
 * for the whole job), known to every rank.  The key goes only through
 * MPI; the services prove it without sending it (recover.c). */
static uint64_t job_agree(unsigned char *key, int *have_key)
{
    uint64_t job = 0, agreed[3 + SMR_KEY_LEN / 8];
    memset(agreed, 0, sizeof(agreed));
    if (smpi.rank == 0) {
        struct timespec ts;
        char host[64] = "";
        clock_gettime(CLOCK_REALTIME, &ts);
        gethostname(host, sizeof(host) - 1);
        job = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
              ((uint64_t)getpid() << 16);
        for (const char *p = host; *p; p++) {
            job = job * 131 + (unsigned char)*p;
        }
        job &= (1ull << 53) - 1; /* printable as a JSON integer anywhere */
        agreed[0] = job;
        agreed[2] = getrandom(&agreed[3], SMR_KEY_LEN, 0) == SMR_KEY_LEN;
    }
    agreed[1] = (uint64_t)smpi_cfg.on_fault; /* every rank does as rank 0 */
    PMPI_Bcast(agreed, (int)(sizeof(agreed) / sizeof(agreed[0])), MPI_UINT64_T,
               0, smpi.oob_world);
    job = agreed[0];
    smpi_cfg.on_fault = (int)agreed[1];
    *have_key = (int)agreed[2];
    memcpy(key, &agreed[3], SMR_KEY_LEN);
    memset(agreed, 0, sizeof(agreed));
    return job;
}

static void sharp_setup(void)
{
    int size, have_key = 0;
    uint64_t job;
    unsigned char key[SMR_KEY_LEN];

    smpi_cfg_load();
    PMPI_Comm_rank(MPI_COMM_WORLD, &smpi.rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    smpi_why_init();
    smpi.init_why = WHY_DISABLED;
    if (!smpi_cfg.enable) {
        smpi_note(1, "disabled by SHARP_MPI_ENABLE=0: plain MPI");
        return;
    }
    /* MPI_THREAD_MULTIPLE on any rank: the layer's lock is taken on
     * every rank (lock.c), and libsharp_coll's thread support is on;
     * SHARP_MPI_THREAD_MULTIPLE=0: plain MPI on every rank, said once */
    int level = MPI_THREAD_SINGLE, top = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&level);
    PMPI_Allreduce(&level, &top, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (top >= MPI_THREAD_MULTIPLE && !smpi_cfg.threads) {
        smpi.init_why = WHY_THREAD_MULTIPLE;
        if (smpi.rank == 0) {
            smpi_note(0,
                      "MPI_THREAD_MULTIPLE with SHARP_MPI_THREAD_MULTIPLE=0: "
                      "collectives go to the MPI library: plain MPI");
        }
        return;
    }
    smpi.threads = top >= MPI_THREAD_MULTIPLE;
    PMPI_Comm_dup(MPI_COMM_WORLD, &smpi.oob_world);
    smpi.have_oob = 1;
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, smpi_comm_delete,
                            &smpi.keyval, NULL);
    job = job_agree(key, &have_key);

    struct sharp_coll_init_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.job_id = job;
    spec.world_rank = smpi.rank;
    spec.world_size = size;
    spec.config = sharp_coll_default_config;
    spec.config.flags = smpi_cfg.verbose >= 1 ? 0 : SHARP_COLL_HIDE_ERRORS;
    spec.oob_colls.bcast = oob_bcast;
    spec.oob_colls.barrier = oob_barrier;
    spec.oob_colls.gather = oob_gather;
    spec.oob_ctx = &smpi.oob_world;
    spec.progress_func = smpi_mpi_progress; /* sharp's waits let MPI move */
    spec.enable_thread_support = smpi.threads;
    int rc = sharp_coll_init(&spec, &smpi.ctx);
    if (rc != SHARP_COLL_SUCCESS) {
        memset(key, 0, sizeof(key));
        smpi.ctx = NULL;
        smpi.init_why = smpi_why_of_status(rc);
        if (smpi.rank == 0) {
            smpi_note(1, "sharp unavailable (%s: %s): plain MPI",
                      smpi_why_name(smpi.init_why), sharp_coll_strerror(rc));
        }
        return;
    }
    smpi.had_sharp = 1;
    smpi.init_why = WHY_OK;
    smpi_note(2, "sharp job %llu up", (unsigned long long)job);
    if (smpi_cfg.on_fault == SMPI_FALLBACK) {
        recovery_setup(size, key, have_key);
    }
    memset(key, 0, sizeof(key));
}

static void report(void)
{
    unsigned long long c[C_N][2], b[C_N][2];
    PMPI_Reduce(smpi.calls, c, C_N * 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    PMPI_Reduce(smpi.bytes, b, C_N * 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    unsigned long long mine[8] = {smpi.fallen,           smpi.fetched,
                                  smpi.redone,           0,
                                  smpi.regrouped,        smpi.failovers,
                                  smpi.standbys_missing, smpi.standbys_remade},
                       rec[8];
    PMPI_Reduce(mine, rec, 8, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    PMPI_Reduce(&smpi.recovery_us_max, &rec[3], 1, MPI_UNSIGNED_LONG_LONG,
                MPI_MAX, 0, MPI_COMM_WORLD);
    unsigned long long steps[2] = {smpi.node_shm_steps, smpi.node_mpi_steps},
                       nsteps[2];
    PMPI_Reduce(steps, nsteps, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    if (smpi.rank != 0) {
        return;
    }
    fprintf(stderr, "sharp_mpi: report (all ranks)%s\n",
            smpi.had_sharp ? "" : " - sharp was not available");
    fprintf(stderr, "sharp_mpi: %-14s %12s %14s %12s %14s\n", "collective",
            "offloaded", "bytes", "fallback", "bytes");
    for (int k = 0; k < C_N; k++) {
        fprintf(stderr, "sharp_mpi: %-14s %12llu %14llu %12llu %14llu\n",
                smpi_coll_names[k], c[k][0], b[k][0], c[k][1], b[k][1]);
    }
    if (nsteps[0] + nsteps[1] > 0) {
        fprintf(stderr,
                "sharp_mpi: node-local aggregation: %llu step(s) on shared "
                "memory, %llu on MPI (counted by each rank)\n",
                nsteps[0], nsteps[1]);
    }
    if (rec[5] + rec[6] > 0) {
        fprintf(stderr,
                "sharp_mpi: standby groups: %llu failover(s) to a standby, "
                "%llu made again after one, %llu communicator(s) without one "
                "(each counted by each member)\n",
                rec[5], rec[7], rec[6]);
    }
    if (rec[0] + rec[1] + rec[2] > 0) {
        fprintf(stderr,
                "sharp_mpi: recovery: %llu communicator(s) fell back to MPI "
                "(counted by each rank), %llu result(s) fetched from another "
                "member, %llu call(s) redone on MPI, longest %.1f ms; "
                "%llu group(s) made again\n",
                rec[0], rec[1], rec[2], (double)rec[3] / 1000.0, rec[4]);
    }
}

API int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) {
        sharp_setup();
        smpi_comm_made(MPI_COMM_WORLD); /* its group, with the job */
    }
    return rc;
}

API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) {
        sharp_setup();
        smpi_comm_made(MPI_COMM_WORLD); /* its group, with the job */
    }
    return rc;
}

API int MPI_Finalize(void)
{
    smpi_nb_drain(NULL); /* operations freed by the program while in flight */
    if (smpi.svc) {
        /* a rank may still be recovering (fetching a result from another
         * rank's record): every record stays until all ranks are here */
        PMPI_Barrier(smpi.oob_world);
    }
    if (smpi.keyval != MPI_KEYVAL_INVALID) {
        /* destroys the world's group (if it has one) */
        void *s;
        int found = 0;
        PMPI_Comm_get_attr(MPI_COMM_WORLD, smpi.keyval, &s, &found);
        if (found) {
            PMPI_Comm_delete_attr(MPI_COMM_WORLD, smpi.keyval);
        }
        PMPI_Comm_free_keyval(&smpi.keyval);
    }
    /* communicators the program never freed: their groups go with the
     * context; MPI may still call their delete callbacks later */
    smpi_comm_forget_all();
    if (smpi.svc) {
        smr_stop();
        smpi.svc = 0;
        free(smpi.addrs);
        smpi.addrs = NULL;
    }
    if (smpi.ctx != NULL) {
        /* libsharp_coll's counters (fragments, multicast, sparse
         * fragments, passes over the bytes) and the record's copies */
        if (smpi_cfg.verbose >= 2) {
            sharp_coll_dump_stats(smpi.ctx);
            fprintf(stderr,
                    "sharp_mpi: rank %d: result bytes copied from the "
                    "recovery record into the program's buffers %llu\n",
                    smpi.rank, smpi.delivered);
        }
        sharp_coll_finalize(smpi.ctx);
        smpi.ctx = NULL;
    }
    if (smpi_cfg.verbose >= 1) {
        report();
        smpi_why_report();
    }
    smpi_why_fini();
    if (smpi.have_oob) {
        PMPI_Comm_free(&smpi.oob_world);
        smpi.have_oob = 0;
    }
    return PMPI_Finalize();
}
