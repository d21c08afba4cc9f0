#!/usr/bin/env python3
"""The checker of a partition run's history (nemesis.py writes it; one JSON
object a line, each with its wall time t and its kind).  Each invariant
is a function below; check() runs them all and returns the violations,
earliest first.

  checker.py HISTORY    exit 1 and the first violation with the history
                        around it, or 0 and "every invariant held"

Invariants (docs/testing.md, "Partitions"):
  one_active_per_epoch  no two managers were ever seen active at one epoch
  epochs_grow           a manager's epoch never went down
  settles               after every heal, and at the end, the fabric
                        settled: one manager active, of the highest epoch,
                        every AN and every sharpd with it
  group_ids_unique      no group id was acknowledged for two groups
  job_keys_unique       no job key was given to two jobs
  an_booking            no AN held a group under another job than the one
                        it was acknowledged to, or two at one id, or more
                        than its limit
  answered              every request to sharpd was answered (an error is
                        an answer; silence for 30 s is not)
  no_silent_loss        every group acknowledged that its process still
                        holds (it did not ask to destroy it or end its
                        job) is, after the last heal, at the manager under
                        its job, unless its process was told
                        (group_revoked, job_killed) or its connection ended
  no_leak               after the last heal no AN holds a group the
                        manager does not have; once every job ended, no
                        group and no job is left at the manager and no
                        group at any AN
  mpi_right             every MPI job exited 0 with every result right
  mpi_bound             no MPI job ran more than MPI_CALM_BOUND_S outside
                        the faults (from each fault's start to its heal)
"""
import json
import sys

AN_MAX_GROUPS = 1000  # sharp_an's max_groups (default)
MPI_CALM_BOUND_S = 30


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def bad(inv, t, msg):
    return {"inv": inv, "t": t, "msg": msg}


def of(recs, kind):
    return [r for r in recs if r["kind"] == kind]


def one_active_per_epoch(recs):
    seen, out = {}, []
    for r in of(recs, "status"):
        if r.get("role") != "active":
            continue
        first = seen.setdefault(r["epoch"], r)
        if first["am"] != r["am"]:
            out.append(bad("one_active_per_epoch", r["t"],
                           "%s and %s both active at epoch %d" %
                           (first["am"], r["am"], r["epoch"])))
    return out[:1]


def epochs_grow(recs):
    last, out = {}, []
    for r in of(recs, "status"):
        if r.get("epoch") is None:
            continue
        if r["epoch"] < last.get(r["am"], 0):
            out.append(bad("epochs_grow", r["t"], "%s: epoch %d after %d" %
                           (r["am"], r["epoch"], last[r["am"]])))
        last[r["am"]] = max(last.get(r["am"], 0), r["epoch"])
    return out[:1]


def settles(recs):
    out = [bad("settles", r["t"], "not settled %.0f s after the heal of %s: "
               "%s" % (r["after"], r["what"], r["why"]))
           for r in of(recs, "settled") if not r["ok"]]
    if not of(recs, "settled"):
        out.append(bad("settles", recs[-1]["t"] if recs else 0,
                       "no settled record: the run did not end"))
    return out


def acks(recs, op):
    """(answer record, request) of every successful op"""
    return [r for r in of(recs, "ans")
            if r["req"]["type"] == op and r["msg"].get("status") == 0]


def group_ids_unique(recs):
    seen, out = {}, []
    for r in acks(recs, "group_create"):
        gid = r["msg"]["group"]["group_id"]
        if gid in seen:
            a = seen[gid]
            out.append(bad("group_ids_unique", r["t"],
                           "group %d acknowledged twice: to %s job %s at "
                           "%.3f, to %s job %s" %
                           (gid, a["client"], a["req"]["job_id"], a["t"],
                            r["client"], r["req"]["job_id"])))
        seen[gid] = r
    return out[:1]


def job_keys_unique(recs):
    seen, out = {}, []
    for r in acks(recs, "job_begin"):
        key, who = r["msg"].get("job_key"), (r["client"], r["req"]["job_id"])
        if key in seen and seen[key] != who:
            out.append(bad("job_keys_unique", r["t"],
                           "job key %s... given to %s job %s and to %s job "
                           "%s" % ((key[:12],) + seen[key] + who)))
        seen.setdefault(key, who)
    return out[:1]


def an_booking(recs):
    job_of = {r["msg"]["group"]["group_id"]: str(r["req"]["job_id"])
              for r in acks(recs, "group_create")}
    out = []
    for d in of(recs, "an_dump"):
        ids = [g[0] for g in d["groups"]]
        if len(ids) != len(set(ids)) or d["ngroups"] > AN_MAX_GROUPS:
            out.append(bad("an_booking", d["at"], "%s holds %d groups, ids "
                           "%s" % (d["an"], d["ngroups"], sorted(ids))))
        for gid, job, _tree in d["groups"]:
            if gid in job_of and job_of[gid] != job:
                out.append(bad("an_booking", d["at"],
                               "%s holds group %d under job %s; it was "
                               "acknowledged to job %s" %
                               (d["an"], gid, job, job_of[gid])))
    return out[:1]


def answered(recs):
    return [bad("answered", r["t"], "%s: %s unanswered: %s" %
                (r["client"], r["msg"]["type"], r["why"]))
            for r in of(recs, "lost")
            if "msg" in r and r["why"].startswith("no answer")][:1]


def note_group(m):
    """the group a note from sharpd says is gone, None for its whole job
    (job_killed, or group_revoked with all or without an id)"""
    if m["type"] == "job_killed" or m.get("all"):
        return None
    return m.get("group_id")


def held_groups(recs, until):
    """group id -> (client, job) of every group acknowledged before until
    that its process still holds: not asked to be destroyed (whatever the
    answer: sharpd forgets a group its owner destroys while the manager is
    away), its job not asked to end, nor revoked to its process, nor left
    by it (its connection ended)"""
    live = {}

    def drop(client, job, gid=None):
        for g, w in list(live.items()):
            if w == (client, str(job)) and gid in (None, g):
                del live[g]

    for r in recs:
        if r["t"] > until:
            break
        c, m = r.get("client"), r.get("msg", {})
        asked = r["req"] if r["kind"] == "ans" else m  # the request
        if r["kind"] in ("req", "ans") and asked["type"] == "group_destroy":
            drop(c, asked["job_id"], asked["group_id"])
        elif r["kind"] in ("req", "ans") and asked["type"] == "job_end":
            drop(c, asked["job_id"])
        elif r["kind"] == "ans" and m.get("status") == 0 and \
                asked["type"] == "group_create":
            live[m["group"]["group_id"]] = (c, str(asked["job_id"]))
        elif r["kind"] == "note":
            drop(c, m.get("job_id"), note_group(m))
        elif r["kind"] == "lost" and not r.get("member"):
            live = {g: w for g, w in live.items() if w[0] != c}
    return live


def no_silent_loss(recs):
    out = []
    held = [r for r in of(recs, "final") if r["phase"] == "held"]
    if not held:
        return [bad("no_silent_loss", 0, "no final view")]
    f = held[0]
    at_am = {g["group_id"]: str(g["job_id"]) for g in (f["groups"] or [])}
    for gid, (client, job) in sorted(held_groups(recs, f["t"]).items()):
        if at_am.get(gid) != job:
            out.append(bad("no_silent_loss", f["t"],
                           "group %d of %s job %s: acknowledged, never "
                           "destroyed, nobody told, not at the manager %s" %
                           (gid, client, job, f["active"])))
    return sorted(out, key=lambda v: v["t"])[:1]


def at_final(recs, phase):
    """the final view of phase, and each AN's dump made for it"""
    f = [r for r in of(recs, "final") if r["phase"] == phase]
    if not f:
        return None, {}
    last = {}
    for d in of(recs, "an_dump"):
        if d["at"] <= f[0]["t"] and (d["an"] not in last or
                                     d["at"] >= last[d["an"]]["at"]):
            last[d["an"]] = d
    return f[0], last


def no_leak(recs):
    out = []
    held, dumps = at_final(recs, "held")
    if held is not None:  # after the heal, ANs hold what the manager has
        known = {g["group_id"] for g in held["groups"] or []}
        for an, d in sorted(dumps.items()):
            extra = sorted(g[0] for g in d["groups"] if g[0] not in known)
            if extra and d["at"] >= held["t"] - 3:  # the dumps for it
                out.append(bad("no_leak", d["at"], "%s holds %s, groups "
                               "the manager %s does not have" %
                               (an, extra, held["active"])))
    f, dumps = at_final(recs, "ended")
    if f is None:
        return [bad("no_leak", 0, "no final view")]
    if f["groups"] or f["jobs"]:
        out.append(bad("no_leak", f["t"], "left at the manager: groups %s, "
                       "jobs %s" % ([g["group_id"] for g in f["groups"]],
                                    [j.get("id", j) for j in f["jobs"]])))
    for an in sorted({d["an"] for d in of(recs, "an_dump")}):
        d = dumps.get(an)
        if d is None or d["at"] < f["t"] - 5:
            out.append(bad("no_leak", f["t"], "%s: no dump at the end" % an))
        elif d["ngroups"]:
            out.append(bad("no_leak", d["at"], "%s still holds %s" %
                           (an, [g[0] for g in d["groups"]])))
    return out[:1]


def mpi_right(recs):
    return [bad("mpi_right", r["end"], "MPI job %d (%s): exit %s, %s" %
                (r["job"], " ".join(r["prog"]), r["rc"],
                 "results right" if r["right"] else "NOT every result right"))
            for r in of(recs, "mpi") if r["rc"] != 0 or not r["right"]][:1]


def faults(recs):
    """[start, heal] of every nemesis"""
    out, start = [], None
    for r in of(recs, "nemesis"):
        if r["phase"] == "start":
            start = r["t"]
        elif start is not None:
            out.append((start, r["t"]))
            start = None
    if start is not None:
        out.append((start, float("inf")))
    return out


def mpi_bound(recs):
    fs, out = faults(recs), []
    for r in of(recs, "mpi"):
        under = sum(max(0, min(b, r["end"]) - max(a, r["start"]))
                    for a, b in fs)
        calm = r["end"] - r["start"] - under
        if calm > MPI_CALM_BOUND_S:
            out.append(bad("mpi_bound", r["end"], "MPI job %d ran %.0f s "
                           "outside the faults" % (r["job"], calm)))
    return out[:1]


INVARIANTS = [one_active_per_epoch, epochs_grow, settles, group_ids_unique,
              job_keys_unique, an_booking, answered, no_silent_loss, no_leak,
              mpi_right, mpi_bound]


def check(recs):
    out = []
    for inv in INVARIANTS:
        out += inv(recs)
    return sorted(out, key=lambda v: v["t"])


def when(r):
    """the time of what a record says (an AN's dump: when the AN wrote it)"""
    return r.get("at", r["t"])


def brief(r, t0):
    keep = {k: v for k, v in r.items() if k not in ("t", "kind", "at")}
    s = json.dumps(keep, sort_keys=True)
    return "+%.3f %-8s %s" % (when(r) - t0, r["kind"], s[:160])


def explain(recs, v, around=6.0, most=40):
    t0 = recs[0]["t"] if recs else 0
    lines = ["FIRST VIOLATION: %s at +%.1f s: %s" % (v["inv"], v["t"] - t0,
                                                   v["msg"]),
             "the schedule:"]
    lines += ["  +%.1f %s %s %s" % (r["t"] - t0, r["phase"], r["what"],
                                    r.get("on", ""))
              for r in of(recs, "nemesis")]
    near = sorted((r for r in recs if abs(when(r) - v["t"]) <= around
                   and r["kind"] not in ("sharpd",)), key=when)
    lines.append("the history within %.0f s of it (%d records, %d shown):" %
                 (around, len(near), min(len(near), most)))
    lines += ["  " + brief(r, t0) for r in near[-most:]]
    return "\n".join(lines)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: checker.py HISTORY")
    recs = load(sys.argv[1])
    out = check(recs)
    if out:
        print(explain(recs, out[0]))
        return 1
    print("every invariant held (%d records)" % len(recs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
