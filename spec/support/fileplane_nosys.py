#!/usr/bin/env python3
"""Runs a command on a "kernel without openat2": a seccomp filter makes openat2 fail with ENOSYS.

    fileplane_nosys.py COMMAND [ARG...]

Used by spec/fileplane_spec.lua to show the plane's automatic fallback to the component walk.
x86_64 and aarch64 only (the syscall number of openat2, 437, is the same on both).
"""
import ctypes
import errno
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
NR_OPENAT2 = 437
# BPF: ld, jeq, ret
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_RET_K = 0x06


def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


def main():
    arch = AUDIT_ARCH.get(platform.machine())
    if arch is None:
        sys.exit("fileplane_nosys: unsupported machine " + platform.machine())
    prog = b"".join([
        insn(BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        insn(BPF_JEQ_K, 1, 0, arch),
        insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),  # another ABI: leave it alone
        insn(BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        insn(BPF_JEQ_K, 0, 1, NR_OPENAT2),
        insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
        insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ])
    buf = ctypes.create_string_buffer(prog, len(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        sys.exit("fileplane_nosys: no_new_privs: " + os.strerror(ctypes.get_errno()))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        sys.exit("fileplane_nosys: seccomp: " + os.strerror(ctypes.get_errno()))
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
