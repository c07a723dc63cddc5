#!/usr/bin/env python3
"""The proxy's file-level call graph and its largest cycle.

Reads the object files of a build (default: build/) with `nm`: each object's defined text
symbols (T) and undefined ones (U) give the edges exactly -- file A calls file B when A leaves
undefined a function that B defines. Prints the largest strongly connected component (the files
that all reach each other through calls), its size first:

    spec/support/call_cycle.py [BUILD_DIR] [--max N]

With --max N it exits 1 when the largest cycle holds more than N files (a spec's guard).
"""
import os
import subprocess
import sys

OBJ_DIRS = ("CMakeFiles/sandstack-proxy.dir", "CMakeFiles/sandstack_proxy_parsers.dir")


def objects(build):
    for d in OBJ_DIRS:
        root = os.path.join(build, d, "csrc", "proxy")
        for dirpath, _, names in os.walk(root):
            for n in names:
                if n.endswith(".c.o"):
                    path = os.path.join(dirpath, n)
                    yield os.path.relpath(path, os.path.join(build, d))[: -len(".o")], path


def symbols(path):
    out = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "T":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
    return defined, undefined


def graph(build):
    defs, uses = {}, {}
    for name, path in objects(build):
        defs[name], uses[name] = symbols(path)
    owner = {sym: f for f, syms in defs.items() for sym in syms}
    return {f: {owner[s] for s in uses[f] if s in owner and owner[s] != f} for f in defs}


def components(g):
    """Tarjan's strongly connected components, iterative (no recursion limit)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in g:
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def main(argv):
    build, limit = "build", None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--max":
            limit = int(args.pop(0))
        else:
            build = a
    g = graph(build)
    if not g:
        print("no proxy objects under %s (build it first)" % build, file=sys.stderr)
        return 2
    largest = max(components(g), key=len)
    size = len(largest) if len(largest) > 1 else 0
    print("largest cycle: %d files" % size)
    for f in largest if size else []:
        print("  " + f)
    if limit is not None and size > limit:
        print("the cycle grew beyond %d files" % limit, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
