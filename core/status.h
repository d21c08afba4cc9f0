/*
 * shp_status_t: the one status type of the project.
 *
 * SHP_OK is 0, SHP_INPROGRESS is 1, errors are negative and grouped by blast
 * radius: generic (-1..-19) affect one call, link (-20..-39) one connection,
 * group/tree (-40..-59) one group or tree, job (-60..-79) a whole job.
 * Values are stable: they travel in wire error messages.  Never reuse one.
 */
#ifndef SHP_COMMON_STATUS_H
#define SHP_COMMON_STATUS_H

#define SHP_WUR __attribute__((warn_unused_result))

typedef enum shp_status {
    SHP_OK = 0,
    SHP_INPROGRESS = 1,

    /* generic: one call failed */
    SHP_ERR_NO_MEMORY = -1,
    SHP_ERR_INVALID_PARAM = -2,
    SHP_ERR_UNSUPPORTED = -3,
    SHP_ERR_IO = -4,
    SHP_ERR_TIMED_OUT = -5,
    SHP_ERR_NO_RESOURCE = -6,
    SHP_ERR_BUSY = -7,
    SHP_ERR_NOT_FOUND = -8,
    SHP_ERR_EXISTS = -9,
    SHP_ERR_PARSE = -10,
    SHP_ERR_PROTO = -11,
    SHP_ERR_VERSION = -12,
    SHP_ERR_TOO_LARGE = -13,
    SHP_ERR_PERM = -14,
    SHP_ERR_CANCELED = -15,
    SHP_ERR_AGAIN = -16,

    /* link: one connection is gone or unusable */
    SHP_ERR_CONN_REFUSED = -20,
    SHP_ERR_CONN_RESET = -21,
    SHP_ERR_UNREACHABLE = -22,
    SHP_ERR_KEEPALIVE = -23,
    SHP_ERR_AUTH = -24,
    SHP_ERR_CLOSED = -25,
    SHP_ERR_STANDBY = -26,     /* a standby manager: not the active one */
    SHP_ERR_STALE_EPOCH = -27, /* a manager older than one already seen */

    /* group / tree: one group or tree failed */
    SHP_ERR_GROUP_FAILED = -40,
    SHP_ERR_GROUP_UNKNOWN = -41,
    SHP_ERR_TREE_DOWN = -42,
    SHP_ERR_NO_TREE = -43,
    SHP_ERR_BAD_KEY = -44,
    SHP_ERR_SEQ_WINDOW = -45,
    SHP_ERR_MISMATCH = -46,
    SHP_ERR_QUOTA = -47,
    SHP_ERR_GROUP_REVOKED = -48,

    /* job: a whole job is affected */
    SHP_ERR_JOB_REFUSED = -60,
    SHP_ERR_JOB_KILLED = -61,
    SHP_ERR_JOB_UNKNOWN = -62,

    SHP_ERR_LAST = -80
} shp_status_t;

/* A short, lowercase, constant description; never NULL. */
const char *shp_status_str(shp_status_t status);

/* The status name, e.g. "SHP_ERR_IO"; never NULL. */
const char *shp_status_name(shp_status_t status);

/* Convert an errno value (positive) to a status, exactly once, at the
 * boundary where the system call failed. */
shp_status_t shp_status_from_errno(int err);

/* True if `value` is a status code this build knows. */
int shp_status_is_valid(int value);

#endif
