#!/usr/bin/env python3
"""fake_engine.py whose label lists say what a spec wants, for spec/docker_list_answer_spec.lua.

    list_answer_engine.py SOCKET_PATH ANSWER_DIR

GET /containers/json, /networks and /volumes answer 200 with the bytes of ANSWER_DIR/containers,
ANSWER_DIR/networks and ANSWER_DIR/volumes, read at each request (so a spec changes an answer
between calls by rewriting the file); a missing file gives fake_engine.py's own answer (empty
lists). Every such request is appended to ANSWER_DIR/requests, and every removal (DELETE) to
ANSWER_DIR/deletes, so a spec can tell what was asked and that nothing was removed. Everything
else is fake_engine.py's."""
import os
import sys
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_engine  # noqa: E402

ANSWERS = sys.argv[2] if len(sys.argv) > 2 else "."
LISTS = {"/containers/json": "containers", "/networks": "networks", "/volumes": "volumes"}


def note(name, line):
    with open(os.path.join(ANSWERS, name), "a") as f:
        f.write(line + "\n")


class Handler(fake_engine.Handler):
    def route(self, method, target, headers, body):
        path = urlsplit(target).path
        parts = path.split("/")
        if len(parts) > 1 and parts[1].startswith("v1."):
            path = "/" + "/".join(parts[2:])
        if method == "GET" and path in LISTS:
            note("requests", path)
            try:
                with open(os.path.join(ANSWERS, LISTS[path]), "rb") as f:
                    answer = f.read()
            except OSError:
                answer = None
            if answer is not None:
                self.send(200, answer)
                return True
        if method == "DELETE":
            note("deletes", path)
        return super().route(method, target, headers, body)


def main():
    path = sys.argv[1]
    if os.path.exists(path):
        os.unlink(path)
    fake_engine.Server(path, Handler).serve_forever()


if __name__ == "__main__":
    main()
