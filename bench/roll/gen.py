#!/usr/bin/env python3
"""Generate a synthetic htools text cluster for benchmarking `nodecare roll`.

Mostly DRBD instances (primary and secondary in the same node group), some
plain, rbd and diskless ones, a few stopped; nodes carry `rack:` tags.

usage: gen.py NODES INSTANCES [--group-size N] [--rack-size N] [--seed S]
"""
import argparse
import random
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nodes", type=int)
    ap.add_argument("instances", type=int)
    ap.add_argument("--group-size", type=int, default=50)
    ap.add_argument("--rack-size", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    n_groups = max(1, (a.nodes + a.group_size - 1) // a.group_size)
    group_of = [i // a.group_size for i in range(a.nodes)]
    members = [[] for _ in range(n_groups)]
    for i, g in enumerate(group_of):
        members[g].append(i)
    t_mem, n_mem, t_dsk = 262144, 4096, 8000000
    used_mem = [0] * a.nodes
    used_dsk = [0] * a.nodes
    insts = []
    for k in range(a.instances):
        r = rnd.random()
        template = "drbd" if r < 0.88 else "plain" if r < 0.93 else "rbd" if r < 0.97 else "diskless"
        status = "running" if rnd.random() < 0.95 else "ADMIN_down"
        p = rnd.randrange(a.nodes)
        s = ""
        if template == "drbd":
            g = members[group_of[p]]
            if len(g) < 2:
                template = "plain"
            else:
                sn = p
                while sn == p:
                    sn = rnd.choice(g)
                s = sn
        mem = rnd.choice([1024, 2048, 4096, 8192])
        dsk = rnd.choice([10240, 20480, 51200, 102400]) if template in ("drbd", "plain") else 0
        if status == "running":
            used_mem[p] += mem
        used_dsk[p] += dsk
        if s != "":
            used_dsk[s] += dsk
        insts.append((k, mem, dsk, status, p, s, template))
    out = sys.stdout
    for g in range(n_groups):
        out.write(f"group-{g:03d}|uuid-{g:03d}|preferred||\n")
    out.write("\n")
    for i in range(a.nodes):
        f_mem = t_mem - n_mem - used_mem[i]
        f_dsk = t_dsk - used_dsk[i]
        flag = "M" if i == 0 else "N"
        rack = f"rack:g{group_of[i]:03d}r{(i % a.group_size) // a.rack_size}"
        out.write(f"node-{i:05d}|{t_mem}|{n_mem}|{f_mem}|{t_dsk}|{f_dsk}|32|{flag}|uuid-{group_of[i]:03d}|1|{rack}\n")
    out.write("\n")
    for (k, mem, dsk, status, p, s, template) in insts:
        sname = f"node-{s:05d}" if s != "" else ""
        out.write(f"inst-{k:06d}|{mem}|{dsk}|1|{status}|Y|node-{p:05d}|{sname}|{template}||1\n")
    out.write("\n\n")


if __name__ == "__main__":
    main()
