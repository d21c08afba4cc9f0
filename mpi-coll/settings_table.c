/*
 * libsharp_mpi's settings as rows of an option table: each a name (its
 * variable is SHARP_MPI_ and the name in capitals), a default, what it
 * does, and its kind (core/config.h parses and prints them).  The layer
 * reads them at MPI_Init (settings.c); the man page's ENVIRONMENT is
 * printed from the same rows (man/man_mpi.c).
 */
#include "mpi-coll/settings.h"

static const shp_config_range_t r_verbose = {0, 3};
static const shp_config_range_t r_ranks = {2, 1 << 30};
static const shp_config_range_t r_yield = {0, 1000000};
static const shp_config_range_t r_calls = {0, 1 << 30};
static const char *const on_fault_names[] = {"fallback", "abort", NULL};
static const char *const group_at_names[] = {"create", "first", NULL};

#define ROW(name, def, doc, field, kind, arg)                                  \
    {                                                                          \
        name, def, doc, offsetof(smpi_cfg_t, field), &kind, arg, 0             \
    }

static const shp_config_opt_t smpi_opts[] = {
    ROW("enable", "1", "0: plain MPI", enable, shp_cfg_bool, NULL),
    ROW("verbose", "0",
        "1: a notice when sharp is unavailable; each communicator not "
        "offloaded reported once, by its rank 0, with its reason and the "
        "setting that would change it; each class of call that goes to MPI "
        "on a communicator once; and at MPI_Finalize a report of the calls "
        "and bytes offloaded and fallen back with the table \"not "
        "offloaded, because\" (see WHY A CALL WENT TO MPI); 2: also notes "
        "per communicator, and each rank's libsharp_coll counters at "
        "MPI_Finalize (fragments, results by multicast, sparse fragments and "
        "the zero blocks they left out)",
        verbose, shp_cfg_int, &r_verbose),
    ROW("min_ranks", "2", "smaller communicators use MPI", min_ranks,
        shp_cfg_int, &r_ranks),
    ROW("max_bytes", "64m", "larger messages use MPI", max_bytes, shp_cfg_size,
        NULL),
    ROW("allreduce", "1",
        "0 sends MPI_Allreduce and its non-blocking and "
        "persistent forms to MPI",
        allreduce, shp_cfg_bool, NULL),
    ROW("reduce", "1", "0 sends MPI_Reduce (and its forms) to MPI", reduce,
        shp_cfg_bool, NULL),
    ROW("barrier", "1", "0 sends MPI_Barrier (and its forms) to MPI", barrier,
        shp_cfg_bool, NULL),
    ROW("bcast", "1", "0 sends MPI_Bcast (and its forms) to MPI", bcast,
        shp_cfg_bool, NULL),
    ROW("node_aggr", "1",
        "1: one group member per node, the node's ranks meeting in shared "
        "memory; 0: every process a member",
        node_aggr, shp_cfg_bool, NULL),
    ROW("node_shm", "1",
        "1: the node-local step on shared memory (a segment per "
        "communicator and node, futex waits); 0: on MPI (gather and bcast)",
        node_shm, shp_cfg_bool, NULL),
    ROW("node_shm_slot", "64k",
        "bytes a rank in the node's segment; larger data take the step on "
        "MPI (non-blocking ones: on PMPI)",
        node_shm_slot, shp_cfg_size, NULL),
    ROW("node_shm_timeout", "0",
        "how long a rank waits in the node step for another live one before "
        "the job is aborted naming it; 0 waits as long as it takes, as MPI "
        "does for a late rank (a dead rank is seen at once either way)",
        node_shm_timeout_ms, shp_cfg_time, NULL),
    ROW("node_shm_yield_us", "2000",
        "microseconds a rank waiting in the blocking node step looks at the "
        "segment between sched_yield calls before it sleeps on the "
        "segment's futex; 0 sleeps at once",
        node_shm_yield_us, shp_cfg_uint, &r_yield),
    ROW("on_fault", "fallback",
        "a group failed: fallback (the job goes on, that communicator on "
        "MPI) or abort (the job aborts naming the failure); rank 0's "
        "setting holds",
        on_fault, shp_cfg_enum, on_fault_names),
    ROW("recovery_timeout", "30s",
        "how long a recovery may take before the job aborts",
        recovery_timeout_ms, shp_cfg_time, NULL),
    ROW("regroup_calls", "1000",
        "a communicator fallen back to MPI tries a new group after this "
        "many eligible calls (doubled after each failed try); 0: never",
        regroup_calls, shp_cfg_int, &r_calls),
    ROW("standby", "1",
        "1: each offloaded communicator also joins a standby group, on the "
        "tree that shares the fewest aggregation nodes with its group's; "
        "when the group fails, the operations from the first that completed "
        "nowhere go on through the standby instead of MPI, and a new "
        "standby is made (standby_after); 0: none, a failed group's "
        "communicator goes to MPI; each standby is a group of the job's "
        "quota",
        standby, shp_cfg_bool, NULL),
    ROW("standby_after", "2s",
        "a communicator that failed over to its standby makes a new one "
        "at the first try (every regroup_calls calls) at least this long "
        "after the failure, when the manager has rebuilt its trees",
        standby_after_ms, shp_cfg_time, NULL),
    ROW("reproducible", "0",
        "1: MPI_SUM of floating-point types is exact (SHARP_OP_SUM_EXACT): "
        "the same bits on any number of hosts, ranks per host, placement "
        "or rank order",
        reproducible, shp_cfg_bool, NULL),
    ROW("thread_multiple", "1",
        "a job at MPI_THREAD_MULTIPLE is offloaded (the layer takes its "
        "lock); 0: such a job runs on plain MPI",
        threads, shp_cfg_bool, NULL),
    ROW("group_at", "create",
        "when a communicator's sharp group is made: create (inside the "
        "blocking call that makes the communicator: MPI_Comm_dup, _split, "
        "_create, ...; the world's in MPI_Init) or first (at its first "
        "blocking collective); either way a communicator's non-blocking and "
        "persistent collectives go to MPI until it has a group, so that none "
        "waits for another process; the same on every rank",
        group_at, shp_cfg_enum, group_at_names),
    ROW("unused_groups", "4",
        "with group_at=create: at most this many communicators of a process "
        "hold a group made with them that no collective has used yet (a "
        "group is a share of the job's quota); one made beyond (the members "
        "agree) gets its group at its first blocking collective",
        unused_groups, shp_cfg_int, &r_calls),
    ROW("persistent_ordered", "0",
        "1: the program starts the persistent collectives of a communicator "
        "in the same order on every rank, with respect to each other and to "
        "its other collectives, and they are offloaded; 0: MPI-4 lets them "
        "be started in any order, and they go to MPI; the same on every rank",
        persistent_ordered, shp_cfg_bool, NULL),
    {NULL, NULL, NULL, 0, NULL, NULL, 0}};

static const shp_config_table_t smpi_table = {"libsharp_mpi", "SHARP_MPI_",
                                              NULL, smpi_opts};

const shp_config_table_t *smpi_config_table(void)
{
    return &smpi_table;
}
