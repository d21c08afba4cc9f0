#!/usr/bin/env python3
"""checker.py catches each invariant it checks: a clean history passes,
and each planted fault (a history as a faulty fabric would have written
it) fails, on that invariant and on no other.  Runs in make check; the
same faults planted in the daemons themselves (PLANT=..., a build with
-DSHP_PLANT) are docs/testing.md's end-to-end demonstration."""
import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402

J1, J2 = 1000001, 2000001


def status(t, am, role, epoch):
    return {"t": t, "kind": "status", "am": am, "role": role,
            "epoch": epoch, "address": "10.77.0.%d:6126" % (am == "sharp_am2")}


def req(t, client, **msg):
    return {"t": t, "kind": "req", "client": client, "msg": msg}


def ans(t, client, q, status=0, **extra):
    return {"t": t, "kind": "ans", "client": client, "req": q,
            "msg": dict(extra, status=status, id=1,
                        type=q["type"] + "_ack")}


def created(t, client, job, gid):
    q = {"type": "group_create", "job_id": job, "members": ["n00001",
                                                            "n00005"]}
    return ans(t, client, q, group={"group_id": gid, "job_id": str(job),
                                    "ans": ["spine01"]})


def destroyed(t, client, job, gid):
    return ans(t, client, {"type": "group_destroy", "job_id": job,
                           "group_id": gid})


def begun(t, client, job, key):
    return ans(t, client, {"type": "job_begin", "job_id": job,
                           "hosts": ["n00001", "n00005"]}, job_key=key)


def dump(at, an, *groups):
    return {"t": 200.0, "kind": "an_dump", "an": an, "at": at,
            "ngroups": len(groups), "groups": [list(g) for g in groups]}


def final(t, phase, groups, jobs=()):
    return {"t": t, "kind": "final", "phase": phase, "active": "sharp_am2",
            "groups": groups, "jobs": list(jobs), "ans": []}


def clean():
    """a run: the managers split (both active, epochs 1 and 2), healed,
    sharp_am steps down; client n00001 made two groups and destroyed
    one, n00008 one, kept; an MPI job through it all"""
    return [
        {"t": 0.0, "kind": "run", "seed": 1, "seconds": 10},
        status(1.0, "sharp_am", "active", 1),
        status(1.0, "sharp_am2", "standby", 0),
        begun(1.5, "n00001", J1, "aa" * 32),
        begun(1.6, "n00008", J2, "bb" * 32),
        created(2.0, "n00001", J1, 101),
        {"t": 3.0, "kind": "nemesis", "phase": "start", "what": "managers",
         "on": [["sharp_am", "sharp_am2"]], "hold": 2.0},
        status(4.0, "sharp_am", "active", 1),
        status(4.0, "sharp_am2", "active", 2),
        created(4.5, "n00008", J2, 4197),
        {"t": 5.0, "kind": "nemesis", "phase": "heal", "what": "managers"},
        status(6.0, "sharp_am", "standby", 1),
        status(6.0, "sharp_am2", "active", 2),
        {"t": 6.5, "kind": "settled", "ok": True, "why": None, "after": 1.5,
         "what": "managers"},
        created(7.0, "n00001", J1, 4198),
        destroyed(7.5, "n00001", J1, 4198),
        {"t": 8.0, "kind": "mpi", "job": 1, "prog": ["mpi_fault_mpich"],
         "start": 2.5, "end": 8.0, "rc": 0, "right": True, "tail": ""},
        {"t": 9.0, "kind": "settled", "ok": True, "why": None, "after": 0.5,
         "what": "final"},
        dump(9.5, "spine01", (101, str(J1), 0), (4197, str(J2), 0)),
        final(10.0, "held", [{"group_id": 101, "job_id": str(J1)},
                             {"group_id": 4197, "job_id": str(J2)}]),
        ans(11.0, "n00001", {"type": "job_end", "job_id": J1}),
        ans(11.0, "n00008", {"type": "job_end", "job_id": J2}),
        final(14.0, "ended", []),
        dump(13.5, "spine01"),
        dump(13.5, "leaf01"),
        dump(13.5, "leaf02"),
    ]


def gone_101():
    """clean(), but group 101 (n00001's, held) is gone from the manager
    and its AN at the end"""
    recs = clean()
    assert recs[18]["kind"] == "an_dump" and recs[19]["phase"] == "held"
    recs[18] = dump(9.5, "spine01", (4197, str(J2), 0))
    recs[19] = final(10.0, "held", [{"group_id": 4197, "job_id": str(J2)}])
    return recs


def with_(recs, *more):
    """recs and more, in time order (as the history is written)"""
    out = copy.deepcopy(recs) + list(more)
    return sorted(out, key=lambda r: r["t"])


class Planted(unittest.TestCase):
    def caught(self, recs, inv, also=()):
        """check() finds inv (and what the fault also breaks: also), and
        explain() names the first"""
        found = checker.check(recs)
        self.assertEqual({v["inv"] for v in found}, {inv} | set(also))
        text = checker.explain(recs, found[0])
        self.assertIn("FIRST VIOLATION: " + found[0]["inv"], text)

    def test_clean_passes(self):
        self.assertEqual(checker.check(clean()), [])

    def test_manager_ignores_higher_epoch(self):
        # sharp_am stays active at epoch 1 after the heal, and a second
        # manager claims epoch 2 too
        self.caught(with_(clean(), status(6.2, "sharp_am", "active", 2)),
                    "one_active_per_epoch")

    def test_epoch_goes_down(self):
        self.caught(with_(clean(), status(6.3, "sharp_am2", "standby", 1),
                          status(6.4, "sharp_am2", "active", 2)),
                    "epochs_grow")

    def test_not_settled(self):
        recs = clean()
        recs[13] = dict(recs[13], ok=False, why="roles ['active', 'active']",
                        after=60)
        self.caught(recs, "settles")

    def test_group_id_twice(self):
        # the new active manager hands out an id the old one gave
        # (and the first group, 101 of J1, is then not at the manager
        # under its job, and its AN's dump shows it under J2)
        self.caught(with_(clean(), created(4.6, "n00008", J2, 101)),
                    "group_ids_unique", also=["no_silent_loss",
                                              "an_booking"])

    def test_job_key_twice(self):
        self.caught(with_(clean(), begun(4.7, "n00008", 2000002, "aa" * 32)),
                    "job_keys_unique")

    def test_an_double_booked(self):
        # an AN holds group 101 under another job than the one it was
        # acknowledged to (it accepted a second group at a used id)
        self.caught(with_(clean(), dump(5.5, "leaf01", (101, "77", 0))),
                    "an_booking")

    def test_an_over_its_limit(self):
        many = [(i, "77", 0) for i in range(1, checker.AN_MAX_GROUPS + 2)]
        self.caught(with_(clean(), dump(5.5, "leaf02", *many)), "an_booking")

    def test_unanswered(self):
        q = {"type": "group_create", "job_id": J1, "members": ["n00001"]}
        self.caught(with_(clean(), {"t": 8.5, "kind": "lost",
                                    "client": "n00001", "msg": q,
                                    "why": "no answer in 30 s"}),
                    "answered")

    def test_group_silently_lost(self):
        recs = gone_101()
        self.caught(recs, "no_silent_loss")

    def test_lost_but_told_passes(self):
        recs = gone_101()
        note = {"t": 8.7, "kind": "note", "client": "n00001",
                "msg": {"type": "group_revoked", "job_id": str(J1),
                        "group_id": 101, "status": -48}}
        self.assertEqual(checker.check(with_(recs, note)), [])

    def test_destroyed_while_away_passes(self):
        # destroyed while the manager was away (the answer an error):
        # sharpd forgets it, its owner asked; gone from the manager
        recs = gone_101()
        q = {"type": "group_destroy", "job_id": J1, "group_id": 101}
        self.assertEqual(checker.check(with_(
            recs, req(8.6, "n00001", **q),
            ans(8.61, "n00001", q, status=-22))), [])

    def test_group_left_at_manager(self):
        recs = clean()
        recs[22] = final(14.0, "ended", [{"group_id": 4197,
                                          "job_id": str(J2)}])
        self.caught(recs, "no_leak")

    def test_an_keeps_a_group_after_the_heal(self):
        # an AN still holds a group the manager no longer has
        self.caught(with_(clean(), dump(9.6, "leaf02", (5000, "77", 0))),
                    "no_leak")

    def test_group_left_at_an(self):
        self.caught(with_(clean(), dump(13.8, "leaf02", (4197, str(J2), 0))),
                    "no_leak")

    def test_wrong_result(self):
        recs = clean()
        recs[16] = dict(recs[16], right=False, rc=1)
        self.caught(recs, "mpi_right")

    def test_rank_waits_after_heal(self):
        recs = clean()
        recs[16] = dict(recs[16], end=2.5 + 2.0 + checker.MPI_CALM_BOUND_S + 5)
        self.caught(recs, "mpi_bound")


if __name__ == "__main__":
    unittest.main(verbosity=2)
