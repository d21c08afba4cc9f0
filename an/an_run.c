/*
 * The aggregation node's loop (shp_an_run).  Over shm the transport spins
 * in its own way, asking how many contributions may arrive before one must
 * wake the AN (shp_an_wake_need).  Over sockets the AN polls for a while
 * after each message while a core is free (sock_spin_us), then sleeps;
 * while it sleeps, quiet links (below) let one child per group wake it
 * instead of every child.
 */
#include "an/an_int.h"

#include "core/time.h"

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

/* How many contributions may arrive before one of them must wake us
 * (shm: the transport's wake_need): the fewest any operation still misses.
 * An operation completes only when every child's payload is in, and one
 * not begun misses them all, so no operation can finish sooner (a free
 * bcast, its root's message alone, does not count: it rings, shm_ep.c); a
 * failed group or one a member left answers every request at once (1).  Too many
 * groups to look at each turn: 1, every message wakes us as before. */
uint32_t shp_an_wake_need(void *arg)
{
    shp_an_t *an = arg;
    unsigned need = UINT_MAX, n = 0;

    for (shp_an_group_t *g = an->groups; g != NULL; g = g->hh.next) {
        if (++n > 64 || g->failed || g->nleft > 0) {
            return 1;
        }
        unsigned g_need = g->nchildren;
        for (unsigned i = 0; i < g->nslots; i++) {
            const shp_an_slot_t *s = &g->slots[i];
            if (s->state == SHP_AN_SLOT_FOLD && s->arrived < g->nchildren &&
                g->nchildren - s->arrived < g_need) {
                g_need = g->nchildren - s->arrived;
            }
        }
        if (g_need < need) {
            need = g_need;
        }
    }
    return need == UINT_MAX || need == 0 ? 1 : need;
}

/* Messages in and out of both transports: the socket spin runs while this
 * moves. */
static uint64_t an_msgs(const shp_an_t *an)
{
    return an->tp.stats.msgs_in + an->tp.stats.msgs_out +
           an->mcast_tp.stats.msgs_in + an->mcast_tp.stats.msgs_out;
}

/* Whether no more processes are runnable than there are cores (this one
 * counted), looked up at most once a millisecond: the fourth field of
 * /proc/loadavg is the number runnable now.  Unknown: no. */
static int an_core_free(shp_an_t *an, uint64_t now)
{
    static long ncpu;
    char b[128];

    if (now - an->load_at < SHP_NSEC_PER_MSEC) {
        return an->core_free;
    }
    an->load_at = now;
    an->core_free = 0;
    if (ncpu == 0) {
        ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    }
    ssize_t n =
        an->loadavg_fd >= 0 ? pread(an->loadavg_fd, b, sizeof(b) - 1, 0) : -1;
    unsigned long running;
    if (n > 0) {
        b[n] = '\0';
        if (sscanf(b, "%*s %*s %*s %lu/", &running) == 1) {
            an->core_free = ncpu > 0 && running <= (unsigned long)ncpu;
        }
    }
    return an->core_free;
}

/* Quiet links (tcp) --------------------------------------------------------
 *
 * A sleeping AN is woken by every child's message, and an operation
 * completes only with the last one: with 8 children, 8 wake-ups (each a
 * pair of context switches on a shared core) where one would do.  So while
 * the AN sleeps, the links of each group's children are quiet (the socket
 * reports nothing below a low-water mark far above one message; see
 * shp_conn_set_quiet) except one, the sentinel: a child that still owes the
 * oldest unfolded operation, which therefore cannot complete before its
 * message comes.  After a sleep, the AN reads (pulls) the quiet links of
 * the groups whose children sent anything meanwhile, in fold order: a
 * group none of whose children spoke waits for its sentinel still, and
 * reading its links would find nothing to complete (a job's idle
 * communicators: at 64 ranks, 4 groups on a leaf made 80 reads an
 * operation, 70 of them empty).  The sentinel stays while it owes; when it
 * sent and others still owe, one of them takes its place: a wrong guess
 * costs a wake-up, never a delay (a sentinel whose message came unread is
 * loud, so readable at once).  A lost connection still wakes the AN; any
 * other message on a quiet link (a retransmit request, a leave) is read
 * when a sleep ends by SHP_AN_QUIET_WAKE_NS with nothing else to wake it
 * (every quiet link is read then), or, while other groups keep the AN
 * busy, within SHP_AN_QUIET_SWEEP_NS; after SHP_AN_QUIET_IDLE_NS without a
 * message every link is loud again.  (At 2 ms, the timer fired while a
 * 64-rank job's leaf waited for its parent's result, and each firing was
 * a wake-up and a read of every quiet link.) */
#define SHP_AN_QUIET_WAKE_NS (5 * SHP_NSEC_PER_MSEC)

#define SHP_AN_QUIET_SWEEP_NS (10 * SHP_NSEC_PER_MSEC)

#define SHP_AN_QUIET_IDLE_NS (20 * SHP_NSEC_PER_MSEC)

/* Groups looked at before each sleep, at most; with more, every link is
 * loud (as the shm board's count gives up: docs/an.md) */
#define SHP_AN_QUIET_MAX_GROUPS 64

/* Whether g's children may be quiet: sound, every child on a link of its
 * own (no other group's messages on it) and at most one operation ahead
 * of the oldest unfolded one (then the ones that owe it are the only news
 * that can complete anything). */
static int an_quiet_ok(const shp_an_group_t *g)
{
    if (g->failed || g->nleft > 0 || g->nchildren < 2 || an_free_next(g)) {
        return 0; /* (a free bcast's root may be any child) */
    }
    for (unsigned i = 0; i < g->nchildren; i++) {
        const shp_an_child_t *c = &g->children[i];
        int32_t ahead = an_seq_diff(c->next_seq, g->folded);
        if (c->link == NULL || c->link->ep == NULL || c->link->is_parent ||
            c->link->ngroups != 1 || ahead < 0 || ahead > 1) {
            return 0;
        }
    }
    return 1;
}

/* g's sentinel: the one of before while it owes the oldest operation (it
 * was the last to send the operations before: the slowest stays the
 * slowest, most often), else the first child that owes it;
 * g->nchildren if none does */
static unsigned an_quiet_sentinel(const shp_an_group_t *g)
{
    if (g->sentinel < g->nchildren &&
        g->children[g->sentinel].next_seq == g->folded) {
        return g->sentinel;
    }
    for (unsigned i = 0; i < g->nchildren; i++) {
        if (g->children[i].next_seq == g->folded) {
            return i;
        }
    }
    return g->nchildren;
}

static void an_quiet_set(shp_an_link_t *l, int on)
{
    if (l->quiet == on || l->ep == NULL) {
        return;
    }
    if (!on) {
        (void)l->ep->tp->ops->quiet(l->ep, 0);
        l->quiet = 0;
        l->an->nquiet--;
    } else if (l->ep->tp->ops->quiet(l->ep, 1) == SHP_OK) {
        l->quiet = 1;
        l->an->nquiet++;
    }
}

/* Before a sleep (on: quiet links wanted): every group's children but its
 * sentinel quiet where the group allows it (g->quiet), every other link
 * loud; !on: all loud */
static void an_quiet_plan(shp_an_t *an, int on)
{
    shp_an_group_t *g, *tmp;
    unsigned n = 0;

    on = on && an->cfg.quiet_links && an->tp.ops->quiet != NULL &&
         an->tp.ops->quiet != shp_tp_stub_quiet && an->tp.ops->pull != NULL;
    if (on) {
        HASH_ITER(hh, an->groups, g, tmp)
        {
            if (++n > SHP_AN_QUIET_MAX_GROUPS) {
                on = 0;
                break;
            }
            g->quiet = an_quiet_ok(g) &&
                       (g->sentinel = an_quiet_sentinel(g)) < g->nchildren;
            g->news = 0;
        }
    }
    if (!on && an->nquiet == 0) {
        return;
    }
    for (shp_an_link_t *l = an->links; l != NULL; l = l->next) {
        g = on && !l->is_parent && l->ngroups == 1
                ? shp_an_group_find(an, l->groups[0])
                : NULL;
        an_quiet_set(l, g != NULL && g->quiet &&
                            l != g->children[g->sentinel].link);
    }
}

/* After a wake-up: what waits on the quiet links of the groups with news
 * (of all after a sleep that timed out, or every SHP_AN_QUIET_SWEEP_NS),
 * each group's children in fold order (a payload ahead of its turn is
 * copied) */
static void an_quiet_pull(shp_an_t *an)
{
    uint32_t ids[SHP_AN_QUIET_MAX_GROUPS];
    shp_an_group_t *g, *tmp;
    unsigned n = 0;

    if (an->nquiet == 0) {
        return;
    }
    uint64_t now = shp_time_ns();
    int all =
        an->quiet_timed_out || now - an->quiet_all_at >= SHP_AN_QUIET_SWEEP_NS;
    if (all) {
        an->quiet_all_at = now;
    }
    an->quiet_timed_out = 0;
    HASH_ITER(hh, an->groups, g, tmp)
    {
        if (g->quiet && (g->news || all) && n < SHP_AN_QUIET_MAX_GROUPS) {
            ids[n++] = g->id;
        }
    }
    for (unsigned k = 0; k < n; k++) {
        g = shp_an_group_find(an, ids[k]);
        for (unsigned i = 0; g != NULL && i < g->nchildren; i++) {
            shp_an_link_t *l = g->children[i].link;
            if (l != NULL && l->quiet && l->ep != NULL) {
                uint64_t in = an->tp.stats.msgs_in;
                an->stats.quiet_reads++;
                l->ep->tp->ops->pull(l->ep); /* may free l */
                an->stats.quiet_msgs += an->tp.stats.msgs_in - in;
                g = shp_an_group_find(an, ids[k]);
            }
        }
    }
}

static void an_quiet_wake_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_an_t *an = w->data;

    (void)loop;
    (void)revents; /* ends the loop's turn: what waits is read then */
    an->quiet_timed_out = 1;
}

void shp_an_run(shp_an_t *an)
{
    uint64_t spin = (uint64_t)an->cfg.sock_spin_us * SHP_NSEC_PER_USEC;

    an->stop = 0;
    if (an->tp.ops == &shp_tp_shm_ops) {
        ev_run(an->loop,
               0); /* shm spins in its own way (transport/shm/shm.c) */
        return;
    }
    an->loadavg_fd = spin == 0
                         ? -1
                         : open(an->loadavg_path != NULL ? an->loadavg_path
                                                         : "/proc/loadavg",
                                O_RDONLY | O_CLOEXEC);
    an->load_at = 0;
    an->quiet_all_at = 0;
    ev_init(&an->quiet_wake, an_quiet_wake_cb);
    an->quiet_wake.data = an;
    an->quiet_timed_out = 0;
    an->quiet_wake.repeat = (double)SHP_AN_QUIET_WAKE_NS / 1e9;
    /* over sockets: poll for sock_spin_us after the last message in or
     * out, yielding the core when a poll brought nothing, then sleep (a
     * sleeping AN lets its core halt, and the next child's message pays
     * for waking it: one child's only, with quiet links) */
    uint64_t seen = an_msgs(an), from = shp_time_ns();
    while (!an->stop) {
        uint64_t n = an_msgs(an), now = shp_time_ns();
        if (n != seen) {
            seen = n;
            from = now;
        }
        if (spin != 0 && now - from < spin && an_core_free(an, now)) {
            an_quiet_plan(an, 0);
            ev_run(an->loop, EVRUN_NOWAIT);
            if (an_msgs(an) == n) {
                sched_yield();
            }
            continue;
        }
        an_quiet_plan(an, now - from < SHP_AN_QUIET_IDLE_NS);
        if (an->nquiet > 0) {
            ev_timer_again(an->loop, &an->quiet_wake);
        } else if (ev_is_active(&an->quiet_wake)) {
            ev_timer_stop(an->loop, &an->quiet_wake);
        }
        ev_run(an->loop, EVRUN_ONCE);
        an_quiet_pull(an);
    }
    an_quiet_plan(an, 0);
    if (ev_is_active(&an->quiet_wake)) {
        ev_timer_stop(an->loop, &an->quiet_wake);
    }
    if (an->loadavg_fd >= 0) {
        close(an->loadavg_fd);
    }
}

void shp_an_quit(shp_an_t *an)
{
    an->stop = 1;
    ev_break(an->loop, EVBREAK_ALL);
}
