#!/usr/bin/env python3
"""Runs a command on a pseudo-terminal of a given size and plays a script against it, as a person
at a terminal would: type a line, wait for a text, change the window size. Prints one JSON
document: what came after each step, and the command's exit status.

usage: pty_drive.py ROWS COLS SCRIPT.json -- CMD ARG...
SCRIPT: a list of steps, each {"type": "text", "expect": "text"} or {"resize": [rows, cols]}
or {"type": "text"} (no wait) or {"pause": seconds}. Each expect waits up to 20 s."""
import fcntl
import json
import os
import pty
import select
import struct
import sys
import termios
import time


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def main():
    rows, cols, script_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    argv = sys.argv[sys.argv.index("--") + 1:]
    with open(script_path) as f:
        script = json.load(f)
    pid, fd = pty.fork()
    if pid == 0:
        set_size(0, rows, cols)  # the size the command finds when it starts
        os.execvp(argv[0], argv)
    out, steps, buf = [], [], b""

    def pump(deadline, want=None):
        nonlocal buf
        while time.monotonic() < deadline:
            if want is not None and want in buf:
                return True
            r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                break
            try:
                data = os.read(fd, 65536)
            except OSError:
                return want is not None and want in buf
            if not data:
                break
            buf += data
        return want is not None and want in buf

    for step in script:
        if "pause" in step:
            time.sleep(step["pause"])
            continue
        if "resize" in step:
            set_size(fd, step["resize"][0], step["resize"][1])  # the kernel sends SIGWINCH
            steps.append({"resized": step["resize"]})
            continue
        buf = b""
        os.write(fd, step["type"].encode())
        if "expect" in step:
            found = pump(time.monotonic() + 20, step["expect"].encode())
            steps.append({"found": found, "output": buf.decode("utf-8", "replace")})
    pump(time.monotonic() + 20)  # the rest, until the command closes the terminal
    _, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    print(json.dumps({"steps": steps, "code": code, "tail": buf.decode("utf-8", "replace")}))


main()
