#!/usr/bin/env python3
"""Which group of a job carries its operations, from the manager's list
(`sharpctl --json groups` on standard input), for the fault tests and
benches that kill the AN carrying a job's group.  Only groups that are up
count: one still being made carries nothing yet.

  groups.py primary    the top AN of the first group that stands by none
                       and is no stripe of another
  groups.py stripe     the top AN of the first stripe (a group that
                       carries a part of another's large operations)
  groups.py pair       "ID TOP-AN" of the first group an up standby stands
                       by (a pair: the group and its standby)
  groups.py busiest    the top AN of the group that stands by none and
                       has made the most exact-mode operations (its top
                       AN's count, as of the manager's last poll), if
                       it made any: the group carrying a job's exact sums

Prints nothing when there is no such group (or the list is unreadable).
"""
import json
import sys


def top(g):
    return next(a["name"] for a in g["ans"] if a["top"])


def main():
    modes = ("primary", "stripe", "pair", "busiest")
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        sys.exit("usage: groups.py primary|stripe|pair|busiest < groups.json")
    try:
        gs = [g for g in json.load(sys.stdin) if g.get("state") == "up"]
    except ValueError:
        return
    if sys.argv[1] == "primary":
        found = [top(g) for g in gs
                 if "standby_of" not in g and "stripe_of" not in g]
    elif sys.argv[1] == "busiest":
        busy = sorted((g for g in gs if "standby_of" not in g
                       and "stripe_of" not in g and g.get("exact_ops", 0) > 0),
                      key=lambda g: -g["exact_ops"])
        found = [top(g) for g in busy]
    elif sys.argv[1] == "stripe":
        found = [top(g) for g in gs if "stripe_of" in g]
    else:
        of = {g.get("standby_of") for g in gs}
        found = ["%d %s" % (g["group_id"], top(g))
                 for g in gs if g["group_id"] in of]
    if found:
        print(found[0])


main()
