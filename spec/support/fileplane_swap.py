#!/usr/bin/env python3
"""The racing guest of spec/fileplane_spec.lua: swaps a directory and a symlink in a tight loop.

    fileplane_swap.py DIR LINK_TARGET SECONDS

DIR is a directory; a symlink DIR.link -> LINK_TARGET is made beside it, then the two names are
exchanged atomically (renameat2 RENAME_EXCHANGE) as fast as possible, alternating with a
non-atomic rename/symlink/rename cycle, until SECONDS pass. DIR ends as the directory again.
Prints the number of swaps.
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


def exchange(a, b):
    if renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


def main():
    d, target, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    db, lb, tb = d.encode(), (d + ".link").encode(), (d + ".real").encode()
    os.symlink(target, d + ".link")
    end = time.monotonic() + seconds
    swaps = 0
    while time.monotonic() < end:
        for _ in range(200):
            exchange(db, lb)  # d is now the link
            exchange(db, lb)  # and the directory again
            os.rename(db, tb)  # a gap with no d at all, then a link named d
            os.symlink(target, d)
            os.unlink(d)
            os.rename(tb, db)
            swaps += 3
    print(swaps)


if __name__ == "__main__":
    main()
