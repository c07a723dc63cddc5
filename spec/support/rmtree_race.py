#!/usr/bin/env python3
"""Trees and a racing "guest" for spec/sbx_rmtree_spec.lua.

    rmtree_race.py build ROOT OUTSIDE   ROOT/d0..d9/{f0..f19, s0..s4/f0..f19}, and OUTSIDE with
                                        the same names one level up (s0..s4/f0..f19, f0..f19),
                                        so a removal that goes through a link named dN deletes
                                        OUTSIDE's file of the same name
    rmtree_race.py race ROOT OUTSIDE SECONDS READY
                                        until SECONDS pass (or the spec kills it): swaps every
                                        directory dN and dN/sM with a symlink to OUTSIDE (or
                                        OUTSIDE/sM), all of them, then all back (renameat2
                                        RENAME_EXCHANGE), with now and then the non-atomic
                                        rename/symlink/unlink/rename cycle, and moves dN/s0
                                        under another dM and back; touches READY after the
                                        first pass.
                                        Every error is ignored: the tree vanishes under it.
    rmtree_race.py move A B SECONDS READY
                                        moves the directory A to B and back (recreating their
                                        parents when the removal took them) until SECONDS
                                        pass: a walk inside it climbs to an unexpected "..";
                                        touches READY after the first move.
    rmtree_race.py deep ROOT LEVELS     ROOT/d/d/.../d (LEVELS directories, far past PATH_MAX)
                                        with a file at the bottom and every 100 levels, made
                                        with mkdir/open relative to a directory fd.
"""
import ctypes
import os
import sys
import time

RENAME_EXCHANGE = 2
AT_FDCWD = -100

libc = ctypes.CDLL(None, use_errno=True)
renameat2 = libc.renameat2
renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]


def build(root, outside):
    for top in (root, outside):
        os.makedirs(top, exist_ok=True)
    for base in [os.path.join(root, "d%d" % i) for i in range(10)] + [outside]:
        for s in range(5):
            sub = os.path.join(base, "s%d" % s)
            os.makedirs(sub, exist_ok=True)
            for f in range(20):
                with open(os.path.join(sub, "f%d" % f), "w") as fh:
                    fh.write("x")
        for f in range(20):
            with open(os.path.join(base, "f%d" % f), "w") as fh:
                fh.write("x")


def quiet(fn, *args):
    try:
        fn(*args)
    except OSError:
        pass


def parent_of(path):
    """A descriptor on path's parent reached without following a link (None when a component is
    a link or gone), and the last component. A guest inside its workspace resolves a planted
    link in its own mount namespace, never to the host's OUTSIDE: so the racer, which runs on the
    host, must not go through the links it plants either, or it would itself move OUTSIDE's
    files into the tree (which the removal then rightly deletes)."""
    parent, name = os.path.split(path)
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None, name
    return fd, name


def at(path, fn):
    fd, name = parent_of(path)
    if fd is None:
        return
    try:
        fn(fd, name.encode() if isinstance(name, str) else name)
    except OSError:
        pass
    finally:
        os.close(fd)


def exchange(d):
    at(d, lambda fd, n: renameat2(fd, n, fd, n + b".l", RENAME_EXCHANGE))


def race(root, outside, seconds, ready):
    dirs = []
    for i in range(10):
        d = os.path.join(root, "d%d" % i)
        dirs.append(d)
        dirs.extend(os.path.join(d, "s%d" % s) for s in range(5))
    # the link for dN points at OUTSIDE, for dN/sM at OUTSIDE/sM: the names below line up
    pairs = [(d.encode(), (outside if os.path.dirname(d) == root else os.path.join(outside, os.path.basename(d))))
             for d in dirs]
    end = time.monotonic() + seconds
    first = True
    while time.monotonic() < end and os.path.isdir(root):
        # every directory becomes the link at once, and stays so while the others swap: about
        # half of the time each name leads outside
        # (every operation is relative to its parent reached without links: see parent_of)
        for d, target in pairs:
            at(d, lambda fd, n, t=target: os.symlink(t, n + b".l", dir_fd=fd))
            exchange(d)
        for d, _ in pairs:
            exchange(d)
        for d, target in pairs[::7]:
            # and now and then the non-atomic cycle: no d at all, a link named d, the directory
            def cycle(fd, n, t=target):
                for step in (lambda: os.rename(n, n + b".t", src_dir_fd=fd, dst_dir_fd=fd),
                             lambda: os.symlink(t, n, dir_fd=fd), lambda: os.unlink(n, dir_fd=fd),
                             lambda: os.rename(n + b".t", n, src_dir_fd=fd, dst_dir_fd=fd)):
                    quiet(step)
            at(d, cycle)
        for i in range(10):
            # a directory moved to another parent and back: a walk inside it finds another ".."
            a = os.path.join(root, "d%d" % i, "s0")
            b = os.path.join(root, "d%d" % ((i + 1) % 10), "s0.mv")
            fa, na = parent_of(a)
            fb, nb = parent_of(b)
            if fa is not None and fb is not None:
                quiet(lambda: os.rename(na, nb, src_dir_fd=fa, dst_dir_fd=fb))
                quiet(lambda: os.rename(nb, na, src_dir_fd=fb, dst_dir_fd=fa))
            for fd in (fa, fb):
                if fd is not None:
                    os.close(fd)
        if first:
            open(ready, "w").close()
            first = False


def move(a, b, seconds, ready):
    end = time.monotonic() + seconds
    first = True
    while time.monotonic() < end:
        for _ in range(100):
            for d in (os.path.dirname(a), os.path.dirname(b)):
                quiet(os.mkdir, d)
            quiet(os.rename, a, b)
            quiet(os.rename, b, a)
        if first:
            open(ready, "w").close()
            first = False


def deep(root, levels):
    os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(levels):
        if i % 100 == 0:
            os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    os.close(fd)


def main():
    cmd = sys.argv[1]
    if cmd == "build":
        build(sys.argv[2], sys.argv[3])
    elif cmd == "race":
        race(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])
    elif cmd == "move":
        move(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])
    elif cmd == "deep":
        deep(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit("rmtree_race.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
