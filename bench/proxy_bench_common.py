"""Client pieces the proxy benches' Python share (bench/proxy_bench.sh, proxy_inspect_bench.sh
put this directory on PYTHONPATH)."""
import base64
import os


def proxy_auth(token):
    """The Proxy-Authorization header line (CRLF included) for the session token."""
    return "Proxy-Authorization: Basic " + base64.b64encode(("b:" + token).encode()).decode() + "\r\n"


def read_to_close(sock):
    """Everything the peer sends until it closes."""
    got = b""
    while True:
        d = sock.recv(65536)
        if not d:
            return got
        got += d


def open_tunnel(sock, target, auth):
    """CONNECT target over sock (to the proxy), reading the answer head byte by byte so that no
    tunnelled byte is consumed; asserts a 200."""
    sock.sendall(("CONNECT %s HTTP/1.1\r\n%s\r\n" % (target, auth)).encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += sock.recv(1)
    assert b" 200 " in head, head


def cpu_seconds(pid):
    """The CPU time (user + system, seconds) process pid has used so far, from /proc."""
    fields = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
