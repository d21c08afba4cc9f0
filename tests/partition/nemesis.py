#!/usr/bin/env python3
"""The partition runner (issue 60; docs/testing.md, "Partitions"): a
--netns sharp-fabric with two managers, a workload that records what it
asked and what it was answered, and a nemesis that splits the network,
pauses and kills daemons while it runs; then checker.py reads the history.

  nemesis.py [--seed S] [--seconds T] [--kinds K,...] [--hold MIN,MAX]
             [--plant P]
             [--dir D] [--bin B] [--tests T] [--history FILE] [--keep]

Workload, all the time:
  - churn clients (one on a host of each leaf) speak to their sharpd as a
    job's process does: begin a job over hosts of both leaves, create
    groups of 2-4 of its hosts, destroy them, end the job now and then;
    every request and answer is recorded with its times, and what sharpd
    says on its own (group_revoked, job_killed);
  - MPI jobs, one after another, 4 ranks under MPICH (its ranks can enter
    the hosts' namespaces: sharp-fabric rank; MPI's own traffic is shared
    memory, untouched by the partitions), through libsharp_mpi with
    standby groups: tests/mpi-coll/mpi_fault (blocking, every result
    checked) and mpi_stress (non-blocking, checked);
  - every second the managers' status (role, epoch), every two each
    sharpd's (which manager, which epoch), every five SIGUSR1 to the ANs
    (their groups, to their logs).
Nemeses, one at a time, drawn from the seed: the managers cut from each
other; the active manager cut from every node; the nodes in two halves
with a manager each; a bridge (spine01 sees both halves, each half one
manager); one AN isolated; one sharpd isolated; a leaf cut from the
spine; a daemon paused (SIGSTOP); a daemon killed and started again; the
active manager killed and started again.
Each lasts 1-10 s; after each heal the runner waits for the fabric to
settle (one active manager of the highest epoch, every AN and every
sharpd with it) and records how long that took.  At the end: heal,
settle, what the manager holds and what every AN holds (before and after
the clients end their jobs).

Last lines: "RESULT partition_seed=S nemeses=N answered=A mpi_jobs=M
settle_max_s=X violated=none|INV,...", then "every invariant held" or the
first violation with the schedule and the history around it.  Exit: 0
when checker.py finds nothing, 1 when it finds something (the seed and
the command that replays the schedule are printed) or the fabric did not
come up.  --plant: a build with the planted faults (core/plant.h)."""
import argparse
import datetime
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checker  # noqa: E402
from sharpd_client import Lost, SharpdClient  # noqa: E402

TOPO = "examples/small-2l.ibnd"
ANS = ["spine01", "leaf01", "leaf02"]
HOSTS = ["n%05d" % i for i in range(1, 9)]
LEAF_HOSTS = {"leaf01": HOSTS[:4], "leaf02": HOSTS[4:]}
AMS = ["sharp_am", "sharp_am2"]
SOCK = {"sharp_am": "am.sock", "sharp_am2": "am2.sock"}
ADOPT_S = 11  # sharp_am's adopt_timeout (10 s), and a second
SETTLE_S = 60  # a fabric not settled this long after a heal: a violation


class History:
    """the run's record: one JSON object a line, each with its wall time"""

    def __init__(self, path):
        self.f = open(path, "w")
        self.lock = threading.Lock()

    def add(self, kind, **kw):
        rec = dict(kw, t=round(time.time(), 4), kind=kind)
        with self.lock:
            self.f.write(json.dumps(rec, sort_keys=True) + "\n")
            self.f.flush()
        return rec


class Fabric:
    def __init__(self, args):
        self.bin, self.dir = args.bin, args.dir

    def cmd(self, *a, timeout=60):
        return subprocess.run([os.path.join(self.bin, "sharp-fabric"),
                               "--dir", self.dir] + list(a),
                              capture_output=True, text=True,
                              timeout=timeout)

    def ctl(self, am, *a):
        """sharpctl --json at manager am, None when it does not answer"""
        try:
            r = subprocess.run([os.path.join(self.bin, "sharpctl"),
                                "--socket",
                                os.path.join(self.dir, SOCK[am]), "--json"]
                               + list(a), capture_output=True, text=True,
                               timeout=3)
            return json.loads(r.stdout) if r.returncode == 0 else None
        except (subprocess.TimeoutExpired, ValueError):
            return None

    def sock(self, host):
        return os.path.join(self.dir, "hosts", host + ".sock")

    def pid(self, name):
        with open(os.path.join(self.dir, "pids")) as f:
            for line in f:
                k, n, _, p = line.split()
                if n == name:
                    return int(p)
        return None


def statuses(fab):
    return {am: fab.ctl(am, "status") for am in AMS}


def active_of(st):
    """the one active manager of the highest epoch, or None"""
    act = [(s["epoch"], am) for am, s in st.items()
           if s and s.get("role") == "active"]
    return max(act)[1] if act else None


def sharpd_view(fab, host):
    """(manager address, epoch) sharpd of host says it is with"""
    c = SharpdClient(fab.sock(host), timeout=2)
    try:
        a = c.connect()
        return a.get("am_active") if a.get("am_up") else None, a.get("epoch")
    except Lost:
        return None, None
    finally:
        c.close()


def settled(fab):
    """one manager active, the other standby, every AN up at the active
    one and every sharpd with it at its epoch: (True, active) or (False,
    why)"""
    st = statuses(fab)
    if any(s is None for s in st.values()):
        return False, "a manager does not answer"
    roles = sorted(s["role"] for s in st.values())
    if roles != ["active", "standby"]:
        return False, "roles %s" % roles
    act = active_of(st)
    s = st[act]
    if s["epoch"] < max(x["epoch"] for x in st.values()):
        return False, "the active manager is not of the highest epoch"
    ans = fab.ctl(act, "ans") or []
    up = sorted(a["name"] for a in ans if a.get("state") == "up")
    if up != sorted(ANS):
        return False, "ANs up at %s: %s" % (act, up)
    for h in HOSTS:
        addr, ep = sharpd_view(fab, h)
        if addr != s["address"] or ep != s["epoch"]:
            return False, "%s is with %s epoch %s" % (h, addr, ep)
    return True, act


def wait_settled(fab, since):
    """settled(), polled every 0.5 s until it holds or SETTLE_S after
    since: (ok, why, seconds since since)"""
    while True:
        ok, why = settled(fab)
        took = time.time() - since
        if ok or took > SETTLE_S:
            return ok, why, took
        time.sleep(0.5)


class Stoppable(threading.Thread):
    def __init__(self, hist, name):
        super().__init__(name=name, daemon=True)
        self.hist, self.stop = hist, threading.Event()


class Churn(Stoppable):
    """a job's process at `host`: jobs and groups, every step recorded"""

    def __init__(self, hist, fab, host, index, rng):
        super().__init__(hist, "churn-" + host)
        self.fab, self.host, self.rng = fab, host, rng
        self.next_job = 1000000 * (index + 1)
        self.c = SharpdClient(fab.sock(host), note=self.note, timeout=30)
        self.job, self.live, self.members = None, [], []

    def note(self, m):
        self.hist.add("note", client=self.host, msg=m)
        if m.get("type") in ("group_revoked", "job_killed"):
            gid = m.get("group_id")
            if m.get("all") or gid is None or m["type"] == "job_killed":
                self.live = []
            else:
                self.live = [g for g in self.live if g != gid]
            if m["type"] == "job_killed":
                self.job = None

    def call(self, msg):
        self.hist.add("req", client=self.host, msg=msg)
        try:
            a = self.c.call(msg)
        except Lost as e:
            self.gone(str(e), msg)
            return None
        self.hist.add("ans", client=self.host, msg=a, req=msg)
        return a

    def begin(self):
        if self.c.sock is None:
            try:
                self.c.connect()
            except Lost as e:
                self.gone(str(e))
                return
        self.next_job += 1
        others = [h for h in HOSTS if h != self.host]
        hosts = [self.host] + self.rng.sample(others, 3)
        a = self.call({"type": "job_begin", "job_id": self.next_job,
                       "hosts": hosts})
        if a is not None and a.get("status") == 0:
            self.job, self.hosts = self.next_job, hosts
            self.attach(hosts[1:])

    def attach(self, hosts):
        """a process of the job on each of its other hosts: sharpd there
        knows the job has processes (a manager taking the fabric over
        keeps a group only when every member host reports its job)"""
        for h in hosts:
            c = SharpdClient(self.fab.sock(h), timeout=30)
            self.hist.add("req", client=self.host, msg={
                "type": "job_attach", "job_id": self.job, "at": h})
            try:
                c.connect()
                a = c.call({"type": "job_attach", "job_id": self.job})
            except Lost as e:
                self.hist.add("lost", client=self.host, why=str(e), msg={
                    "type": "job_attach", "at": h}, member=True)
                c.close()
                continue
            self.hist.add("ans", client=self.host, msg=a, req={
                "type": "job_attach", "job_id": self.job, "at": h})
            self.members.append(c)

    def gone(self, why, msg=None):
        """the connection to sharpd is lost: this process of the job is
        gone as far as sharpd knows, and so are the others"""
        self.hist.add("lost", client=self.host, why=why,
                      **({"msg": msg} if msg else {}))
        self.c.close()
        self.detach()
        self.job, self.live = None, []

    def detach(self):
        for c in self.members:
            c.close()
        self.members = []

    def step(self):
        r = self.rng.random()
        if self.live and (r < 0.35 or len(self.live) >= 6):
            gid = self.rng.choice(self.live)
            a = self.call({"type": "group_destroy", "job_id": self.job,
                           "group_id": gid})
            if a is not None:
                self.live = [g for g in self.live if g != gid]
        elif r < 0.97:
            members = self.rng.sample(self.hosts, self.rng.randint(2, 4))
            a = self.call({"type": "group_create", "job_id": self.job,
                           "members": members})
            if a is not None and a.get("status") == 0:
                self.live.append(a["group"]["group_id"])
        else:
            self.end()

    def end(self):
        if self.job is not None:
            self.call({"type": "job_end", "job_id": self.job})
        self.detach()
        self.job, self.live = None, []

    def run(self):
        while not self.stop.is_set():
            if self.job is None:
                self.begin()
            else:
                self.step()
            try:
                self.c.poll_notes()
            except Lost as e:
                self.gone(str(e))
            self.stop.wait(0.05 + self.rng.random() * 0.1)


class MpiJobs(Stoppable):
    """MPI jobs one after another, each checking its results"""

    def __init__(self, hist, fab, args, rng):
        super().__init__(hist, "mpi")
        self.fab, self.args, self.rng, self.n = fab, args, rng, 0

    def command(self, prog):
        lib = os.path.join(os.path.dirname(self.args.bin), "lib")
        env = ["-genv", "LD_LIBRARY_PATH", lib, "-genv", "LD_PRELOAD",
               os.path.join(lib, "libsharp_mpi_mpich.so"), "-genv",
               "SHARP_FABRIC_DIR", self.fab.dir, "-genv",
               "SHARP_COLL_LOG_LEVEL", "1"]
        exe = os.path.join(self.args.tests, "mpi-coll", prog[0])
        return (["mpiexec.mpich", "-np", "4"] + env +
                [os.path.join(self.args.bin, "sharp-fabric"), "--dir",
                 self.fab.dir, "rank", "--", exe] + prog[1:])

    def one(self):
        self.n += 1
        if self.rng.random() < 0.5:
            prog = ["mpi_fault_mpich", "--calls", "1500"]
        else:
            prog = ["mpi_stress_mpich", "--seed", str(self.rng.randint(1, 10 ** 6)),
                    "--seeds", "1", "--ops", "600"]
        t0 = time.time()
        try:
            r = subprocess.run(self.command(prog), capture_output=True,
                               stdin=subprocess.DEVNULL, text=True,
                               timeout=150)
            rc, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = "timeout", str(e.stdout or "")
        right = "every result right" in out
        self.hist.add("mpi", job=self.n, prog=prog, start=t0, end=time.time(),
                      rc=rc, right=right,
                      tail=out[-1500:] if rc != 0 or not right else "")

    def run(self):
        while not self.stop.is_set():
            self.one()


class Watch(Stoppable):
    """the managers' and sharpds' views, and the ANs' groups"""

    def __init__(self, hist, fab):
        super().__init__(hist, "watch")
        self.fab = fab

    def run(self):
        n = 0
        while not self.stop.wait(1.0):
            for am, s in statuses(self.fab).items():
                self.hist.add("status", am=am,
                              role=s and s.get("role"),
                              epoch=s and s.get("epoch"),
                              address=s and s.get("address"))
            n += 1
            if n % 2 == 0:
                for h in HOSTS:
                    addr, ep = sharpd_view(self.fab, h)
                    self.hist.add("sharpd", host=h, am=addr, epoch=ep)
            if n % 5 == 0:
                usr1(self.fab)


def usr1(fab):
    for a in ANS:
        p = fab.pid(a)
        try:
            os.kill(p, signal.SIGUSR1)  # the AN logs its groups
        except (OSError, TypeError):
            pass


DUMP_STATE = re.compile(r"^\[([0-9T:.-]+)\] sharp_an\[(\d+)\] INFO state: "
                        r"(\d+) groups")
DUMP_GROUP = re.compile(r"^\[([0-9T:.-]+)\] sharp_an\[\d+\] INFO group (\d+) "
                        r"\(job (\d+), tree (\d+)\)")


def an_dumps(fab, hist):
    """every SIGUSR1 dump of every AN's log, into the history"""
    for a in ANS:
        cur = None
        try:
            lines = open(os.path.join(fab.dir, "logs", "an-%s.log" % a),
                         errors="replace").read().splitlines()
        except OSError:
            continue
        for line in lines + [""]:
            m, g = DUMP_STATE.match(line), DUMP_GROUP.match(line)
            if g and cur is not None:
                cur["groups"].append([int(g.group(2)), g.group(3),
                                      int(g.group(4))])
                continue
            if cur is not None:
                hist.add("an_dump", **cur)
                cur = None
            if m:
                at = datetime.datetime.strptime(m.group(1),
                                                "%Y-%m-%dT%H:%M:%S.%f")
                cur = {"an": a, "at": at.timestamp(),
                       "ngroups": int(m.group(3)), "groups": []}


def side(leaf, am):
    return [am, leaf] + LEAF_HOSTS[leaf]


class Nemesis(Stoppable):
    """one fault at a time, drawn from the seed; after each heal, the
    time until the fabric settled"""

    KINDS = ["managers", "active_cut", "halves", "bridge", "an_isolated",
             "sharpd_isolated", "leaf_spine", "pause", "kill", "kill_am"]

    def __init__(self, hist, fab, rng, args):
        super().__init__(hist, "nemesis")
        self.fab, self.rng, self.kinds = fab, rng, args.kinds
        self.hold = args.hold
        self.applied, self.recoveries = [], []

    def partition(self, *sides):
        r = self.fab.cmd("partition", *[",".join(s) for s in sides])
        if r.returncode != 0:
            raise RuntimeError("partition: " + r.stderr.strip())

    def plan(self, kind):
        """what to do for kind: (description, apply, undo)"""
        rng, act = self.rng, active_of(statuses(self.fab)) or "sharp_am"
        other = [a for a in AMS if a != act][0]
        if kind == "managers":
            return [AMS], lambda: self.partition(["sharp_am"], ["sharp_am2"]), None
        if kind == "active_cut":
            return [act], lambda: self.partition([act], ANS + HOSTS), None
        if kind in ("halves", "bridge"):
            first = rng.choice(AMS)
            second = [a for a in AMS if a != first][0]
            a, b = side("leaf01", first), side("leaf02", second)
            if kind == "halves":
                b = b + ["spine01"]
            return [a, b], lambda: self.partition(a, b), None
        if kind in ("an_isolated", "sharpd_isolated"):
            n = rng.choice(ANS if kind == "an_isolated" else HOSTS)
            return [n], lambda: self.partition([n]), None
        if kind == "leaf_spine":
            leaf = rng.choice(["leaf01", "leaf02"])
            return [leaf], lambda: self.partition([leaf], ["spine01"]), None
        n = rng.choice([act, other, rng.choice(ANS), rng.choice(HOSTS)])
        if kind == "kill_am":
            n = act
        if kind == "pause":
            return ([n], lambda: self.fab.cmd("kill", n, "STOP"),
                    lambda: self.fab.cmd("kill", n, "CONT"))
        return ([n], lambda: self.fab.cmd("kill", n),
                lambda: self.fab.cmd("start", n))

    def undo(self, undo):
        self.fab.cmd("heal")
        if undo is not None:
            undo()

    def one(self):
        kind = self.rng.choice(self.kinds)
        hold = round(self.rng.uniform(*self.hold), 1)
        what, apply, undo = self.plan(kind)
        self.hist.add("nemesis", phase="start", what=kind, on=what, hold=hold)
        apply()
        self.stop.wait(hold)
        self.undo(undo)
        t = time.time()
        self.hist.add("nemesis", phase="heal", what=kind)
        ok, why, took = wait_settled(self.fab, t)
        self.hist.add("settled", ok=ok, why=why if not ok else None,
                      after=round(took, 2), what=kind)
        self.applied.append(kind)
        self.recoveries.append(took)
        return ok

    def run(self):
        self.stop.wait(3)
        while not self.stop.is_set():
            if not self.one():
                return
            self.stop.wait(self.rng.uniform(1, 3))


def final_views(fab, hist, phase):
    """what the active manager and every AN hold now"""
    act = active_of(statuses(fab))
    usr1(fab)
    time.sleep(1.0)
    hist.add("final", phase=phase, active=act,
             groups=act and fab.ctl(act, "groups"),
             jobs=act and fab.ctl(act, "jobs"),
             ans=act and fab.ctl(act, "ans"))
    time.sleep(0.5)


def finish(fab, hist, churn, mpi):
    """heal, settle, the views with the clients' groups, then without"""
    mpi.stop.set()
    mpi.join(200)
    fab.cmd("heal")
    for n in AMS + ANS + HOSTS:
        fab.cmd("kill", n, "CONT")
        pid = fab.pid(n)
        if pid is None or not os.path.exists("/proc/%d" % pid):
            fab.cmd("start", n)
    ok, why, took = wait_settled(fab, time.time())
    for c in churn:
        c.stop.set()
    for c in churn:
        c.join(60)
    # a manager that took over keeps what its nodes reported within its
    # adopt_timeout (10 s) and revokes the rest then, telling the processes
    time.sleep(ADOPT_S)
    hist.add("settled", ok=ok, why=None if ok else why,
             after=round(took, 2), what="final")
    for c in churn:  # the notes of the revocations the last heal made
        try:
            c.c.poll_notes()
        except Lost as e:
            c.gone(str(e))
    final_views(fab, hist, "held")
    for c in churn:
        c.end()
        c.c.close()
    time.sleep(3)
    final_views(fab, hist, "ended")
    an_dumps(fab, hist)


def run(args):
    fab = Fabric(args)
    hist = History(args.history)
    rng = random.Random(args.seed)
    hist.add("run", seed=args.seed, seconds=args.seconds, kinds=args.kinds,
             plant=args.plant)
    if args.plant:
        os.environ["SHARP_PLANT"] = args.plant  # the daemons inherit it
    r = fab.cmd("up", os.path.join(args.src, TOPO), "--netns", "--standby",
                timeout=120)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        return 1
    churn = [Churn(hist, fab, h, i, random.Random(rng.random()))
             for i, h in enumerate(["n00001", "n00008"])]
    mpi = MpiJobs(hist, fab, args, random.Random(rng.random()))
    watch = Watch(hist, fab)
    nem = Nemesis(hist, fab, random.Random(rng.random()), args)
    for t in churn + [mpi, watch, nem]:
        t.start()
    nem.join(args.seconds)
    nem.stop.set()
    nem.join(SETTLE_S + 30)
    finish(fab, hist, churn, mpi)
    watch.stop.set()
    watch.join(10)
    hist.f.close()
    return report(args, nem)


def report(args, nem):
    recs = checker.load(args.history)
    bad = checker.check(recs)
    ops = sum(1 for r in recs if r["kind"] == "ans")
    mpi = [r for r in recs if r["kind"] == "mpi"]
    print("partition run, seed %d: %d nemeses (%s), %d requests answered, "
          "%d MPI jobs, longest settling after a heal %.1f s" %
          (args.seed, len(nem.applied), ", ".join(nem.applied), ops, len(mpi),
           max(nem.recoveries or [0])))
    print("RESULT partition_seed=%d nemeses=%d answered=%d mpi_jobs=%d "
          "settle_max_s=%.1f violated=%s" %
          (args.seed, len(nem.applied), ops, len(mpi),
           max(nem.recoveries or [0]),
           ",".join(sorted({v["inv"] for v in bad})) or "none"))
    if bad:
        print(checker.explain(recs, bad[0]))
        print("history: %s; the same schedule again: nemesis.py --seed %d "
              "--seconds %d --kinds %s --hold %g,%g%s" %
              (args.history, args.seed, args.seconds, ",".join(args.kinds),
               args.hold[0], args.hold[1],
               " --plant " + args.plant if args.plant else ""))
        return 1
    print("every invariant held")
    return 0


def main():
    src = os.path.dirname(os.path.dirname(HERE))
    o = os.environ.get("O", "build")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--seconds", type=int, default=90)
    p.add_argument("--dir", default="/tmp/sharp-nemesis.%d" % os.getpid())
    p.add_argument("--bin", default=os.path.join(src, o, "bin"))
    p.add_argument("--tests", default=os.path.join(src, o, "tests"))
    p.add_argument("--history")
    p.add_argument("--kinds", default=",".join(Nemesis.KINDS),
                   help="the nemeses to draw from (default: all)")
    p.add_argument("--hold", default="1,10",
                   help="MIN,MAX: each nemesis lasts MIN to MAX s (1,10)")
    p.add_argument("--plant", default="",
                   help="SHARP_PLANT for the daemons (a PLANT=1 build)")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    args.kinds = args.kinds.split(",")
    args.hold = [float(x) for x in args.hold.split(",")]
    if set(args.kinds) - set(Nemesis.KINDS):
        p.error("--kinds: one of " + ", ".join(Nemesis.KINDS))
    args.src, args.bin = src, os.path.abspath(args.bin)
    args.tests = os.path.abspath(args.tests)
    args.history = args.history or args.dir + ".history.jsonl"
    print("partition run: seed %d, %d s, fabric in %s" %
          (args.seed, args.seconds, args.dir), flush=True)
    try:
        return run(args)
    finally:
        Fabric(args).cmd("down", timeout=120)
        if not args.keep:
            subprocess.run(["rm", "-rf", args.dir])


if __name__ == "__main__":
    sys.exit(main())
