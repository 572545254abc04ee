"""The HTTP layer under attack, through raw sockets (an attack on the server):
framing that two readers could take differently, a body announced over the
limit, and connections that never finish their request (slowloris)."""
import gzip
import re
import select
import socket
import time

import requests

from conftest import SLOW, Server

TOKENIZE = b'{"content": "hi"}'


def connect(port, src="127.0.0.1"):
    s = socket.socket()
    s.bind((src, 0))  # the whole of 127/8 is loopback: other "addresses" for the per-IP limit
    s.connect(("127.0.0.1", port))
    return s


def closed_by_server(s, wait):
    """True if the server closes s within `wait` seconds (EOF or reset);
    reads and discards what it sends meanwhile."""
    deadline = time.time() + wait
    while True:
        left = max(0.0, deadline - time.time())
        if not select.select([s], [], [], left)[0]:
            return False
        try:
            if not s.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True


def exchange(port, data, wait=2.0):
    """Sends data on a fresh connection; what came back within `wait`
    seconds, and whether the server closed the connection by then."""
    s = connect(port)
    s.settimeout(wait)
    out, closed = b"", False
    try:
        s.sendall(data)
        while True:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            out += d
    except socket.timeout:
        pass
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    finally:
        s.close()
    return out, closed


def auth(server):
    return b"Authorization: Bearer " + server.key.encode() + b"\r\n"


def test_two_content_length_headers_refused(server):
    # libmicrohttpd took the first of two Content-Length headers (and the
    # chunked body beside one): a proxy taking the other would see another
    # request in the same bytes (smuggling). 400 at once, and the
    # connection is closed.
    head = b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + auth(server)
    n = b"%d" % len(TOKENIZE)
    for framing, body in [(b"Content-Length: " + n + b"\r\nContent-Length: " + n + b"\r\n", TOKENIZE),
                          (b"Content-Length: " + n + b"\r\nContent-Length: 5\r\n", TOKENIZE),
                          (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                           b"%x\r\n%s\r\n0\r\n\r\n" % (len(TOKENIZE), TOKENIZE)),
                          # "chunked, gzip" in two fields had been read as chunked
                          (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
                           b"%x\r\n%s\r\n0\r\n\r\n" % (len(TOKENIZE), TOKENIZE)),
                          (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                           b"%x\r\n%s\r\n0\r\n\r\n" % (len(TOKENIZE), TOKENIZE))]:
        out, closed = exchange(server.port, head + framing + b"\r\n" + body)
        assert out.startswith(b"HTTP/1.1 400") and b'"code":"invalid_header"' in out, (framing, out[:300])
        assert closed
    out, _ = exchange(server.port, head + b"Connection: close\r\nContent-Length: " + n + b"\r\n\r\n" + TOKENIZE)
    assert out.startswith(b"HTTP/1.1 200"), out[:300]  # one header: as before


def test_header_names_and_host_checked(server):
    # "Content-Length : n" (whitespace before the colon) had been kept by
    # libmicrohttpd as a header of its own: the body was read as empty and
    # then run as the next request on the connection (smuggling behind a
    # proxy that trims the name). RFC 9112 5.1: a 400, and nothing of the
    # body is served.
    inner = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth(server) + b"Connection: close\r\n\r\n"
    for name in [b"Content-Length ", b"Content-Length\t", b"X\x01Y", b"Bad Name"]:
        out, closed = exchange(server.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth(server) +
                               name + b": %d\r\n\r\n" % len(inner) + inner)
        assert out.startswith(b"HTTP/1.1 400") and b'"code":"invalid_header"' in out, (name, out[:300])
        assert b"\nHTTP/1." not in out and b'"data"' not in out, (name, out[:600])  # the body ran as no request
        assert b"is not a token" in out and closed, (name, out[:300])
    # RFC 9112 3.2: an HTTP/1.1 request without Host, or with two, is a 400
    # (its own JSON error, once); HTTP/1.0 needs none.
    for hosts, want in [(b"", b"needs a Host header"), (b"Host: a\r\nHost: b\r\n", b"2 Host headers")]:
        out, closed = exchange(server.port, b"GET /health HTTP/1.1\r\n" + hosts + b"Connection: close\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 400") and want in out and b"\nHTTP/1." not in out, (hosts, out[:300])
    out, _ = exchange(server.port, b"GET /health HTTP/1.0\r\n\r\n")
    assert b" 200 " in out.split(b"\r\n")[0], out[:300]


def test_nul_in_the_path_and_method_not_allowed(server):
    # "%00" decoded into the C-string path had cut it: "/health%00evil" and
    # "/v1/completions%00.png" were served as the endpoints (a proxy that
    # allows or denies by path sees another path than the one routed).
    for path in ["/health%00evil", "/v1/cache/stats%00zzz", "/v1/models%00"]:
        r = requests.get(server.url + path, headers=server.headers(), timeout=10)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (path, r.text)
    r = requests.get(server.url + "/heal%74h", timeout=10)  # other escapes decode as before
    assert r.status_code == 200, r.text
    # A 405 names the methods the path has (RFC 9110: Allow is a must).
    r = requests.delete(server.url + "/v1/models", headers=server.headers(), timeout=10)
    assert r.status_code == 405 and r.headers["Allow"] == "OPTIONS, GET, HEAD", r.headers
    # HEAD is GET without its body (it had been a 405)
    r = requests.head(server.url + "/health", timeout=10)
    assert r.status_code == 200 and r.content == b"" and r.headers["Content-Type"] == "application/json", r.headers
    r = requests.get(server.url + "/v1/chat/completions", headers=server.headers(), timeout=10)
    assert r.status_code == 405 and r.headers["Allow"] == "OPTIONS, POST", r.headers


def test_absolute_form_targets_are_routed(server):
    # RFC 9112 3.2.2: a server accepts "POST http://host/path" (it had been a 404)
    body = b'{"content": "hi"}'
    for target in (b"http://127.0.0.1/tokenize", b"HTTP://x:99/tokenize"):
        out, _ = exchange(server.port, b"POST " + target + b" HTTP/1.1\r\nHost: x\r\n" + auth(server) +
                          b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                          b"\r\n\r\n" + body)
        assert out.startswith(b"HTTP/1.1 200") and b'"tokens"' in out, (target, out[:300])
    for target in (b"http://x/nowhere", b"http:///tokenize", b"http://x#/tokenize"):
        out, _ = exchange(server.port, b"POST " + target + b" HTTP/1.1\r\nHost: x\r\n" + auth(server) +
                          b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert out.startswith(b"HTTP/1.1 404"), (target, out[:300])


def test_unknown_transfer_coding_refused_at_once(server):
    # Transfer-Encoding: gzip (no chunked): libmicrohttpd could not find the
    # body's end and the connection sat silent until the read timeout. A
    # 501 comes at once and the connection is closed.
    t0 = time.time()
    out, closed = exchange(server.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + auth(server) +
                           b"Transfer-Encoding: gzip\r\n\r\n" + TOKENIZE)
    assert out.startswith(b"HTTP/1.1 501") and b'"code":"invalid_header"' in out and b"gzip" in out, out[:300]
    assert closed and time.time() - t0 < 1.5 * SLOW


def test_compressed_body_refused_naming_its_encoding(server):
    # Content-Encoding: gzip had been parsed as JSON ("invalid JSON near byte 1")
    body = gzip.compress(TOKENIZE)
    out, _ = exchange(server.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + auth(server) +
                      b"Content-Encoding: gzip\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert out.startswith(b"HTTP/1.1 415") and b"unsupported_media_type" in out and b"gzip" in out, out[:300]
    out, _ = exchange(server.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + auth(server) +
                      b"Content-Encoding: identity\r\nContent-Length: " + str(len(TOKENIZE)).encode() + b"\r\n\r\n" +
                      TOKENIZE)
    assert out.startswith(b"HTTP/1.1 200"), out[:300]


def requests_by_status(server):
    """kvstitch_requests_total of /metrics: {status: count}."""
    text = requests.get(server.url + "/metrics", timeout=30).text
    found = (re.match(r'kvstitch_requests_total\{status="(\d+)"\} (\d+)$', l) for l in text.splitlines())
    return {int(m.group(1)): int(m.group(2)) for m in found if m}


def test_metrics_count_every_status(server):
    # The CORS preflight's 204 and the unknown transfer coding's 501 were
    # answered but not counted in kvstitch_requests_total (its table of
    # statuses lacked them). Every status the server sends has its line.
    before = requests_by_status(server)
    assert set(before) == {200, 204, 400, 401, 404, 405, 413, 415, 429, 500, 501, 503}, before
    r = requests.options(server.url + "/v1/chat/completions", timeout=10)
    assert r.status_code == 204, r.text
    out, _ = exchange(server.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + auth(server) +
                      b"Transfer-Encoding: gzip\r\n\r\n" + TOKENIZE)
    assert out.startswith(b"HTTP/1.1 501"), out[:300]
    assert requests.get(server.url + "/nowhere", timeout=10).status_code == 404  # counted before too
    after = requests_by_status(server)
    for status in (204, 501, 404):
        assert after[status] == before[status] + 1, (status, before, after)


def test_body_over_the_limit_answered_before_it_is_read(server):
    # A Content-Length over --max-body (262144 here) had its body read and
    # dropped to the end before the 413: 10^15 bytes announced held the
    # connection as long as the client liked. Now the headers settle it.
    t0 = time.time()
    for extra, status in [(auth(server), b"413"),
                          (auth(server) + b"Expect: 100-continue\r\n", b"413"),
                          (b"", b"401")]:  # dispatch's order: the key first
        out, closed = exchange(server.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + extra +
                               b"Content-Length: 1000000000000000\r\n\r\n{\"messages\"")
        assert out.startswith(b"HTTP/1.1 " + status) and closed, (extra, out[:300])
        assert b"100 Continue" not in out
    assert time.time() - t0 < 1.5 * SLOW
    # chunked: nothing announced; past twice the limit the connection is cut
    s = connect(server.port)
    try:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + auth(server) + b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"10000\r\n" + b"y" * 0x10000 + b"\r\n"
        for _ in range(3 * 262144 // 0x10000):
            s.sendall(chunk)
        assert closed_by_server(s, 1.5 * SLOW)
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()


def test_connections_per_ip_capped_by_default(server):
    # 64 connections from one address by default (of the 512 in all): the
    # 65th and on are closed at once, so one client cannot take every place;
    # another address is served meanwhile.
    socks = []
    try:
        for _ in range(72):
            socks.append(connect(server.port, "127.0.0.2"))
        deadline, closed = time.time() + 1.5 * SLOW, set()
        while len(closed) < 8 and time.time() < deadline:
            live = [s for s in socks if s not in closed]
            for s in select.select(live, [], [], max(0.0, deadline - time.time()))[0]:
                if closed_by_server(s, 0):
                    closed.add(s)
        time.sleep(0.1)  # and no more than the 8 over the limit
        closed |= {s for s in socks if s not in closed and closed_by_server(s, 0)}
        assert len(closed) == 8, "%d of 72 connections from one address were refused" % len(closed)
        r = requests.post(server.url + "/tokenize", json={"content": "hi"}, headers=server.headers(), timeout=10)
        assert r.status_code == 200
    finally:
        for s in socks:
            s.close()


def test_silent_connections_closed_after_read_timeout():
    # Slowloris: connections that send nothing, half a request line, or
    # half a body had held their thread (and one of the 512 places) for
    # 600 s. With --read-timeout 1 they are closed after a second of
    # silence, as is a kept-alive connection between requests; a fifth
    # from one address over --max-conns-per-ip 4 is closed at once; and
    # another address is served all along.
    s = Server("--slots", "1", "--ctx", "256", "--read-timeout", "1", "--max-conns-per-ip", "4", api_key=False)
    socks = []
    try:
        t0 = time.time()  # every connection's last byte comes after this
        socks = [connect(s.port, "127.0.0.2") for _ in range(4)]
        socks[1].sendall(b"POST /tokeni")
        socks[2].sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n{\"con")
        socks[3].sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n" + TOKENIZE)
        assert socks[3].recv(4096).startswith(b"HTTP/1.1 200")  # then kept alive, silent
        fifth = connect(s.port, "127.0.0.2")
        assert closed_by_server(fifth, 0.5 * SLOW)
        fifth.close()
        r = requests.post(s.url + "/tokenize", json={"content": "hi"}, timeout=10)
        assert r.status_code == 200 and r.json()["tokens"]
        t1 = time.time()  # and before this
        for k, c in enumerate(socks):
            assert closed_by_server(c, t1 + 1.0 + 0.5 * SLOW - time.time()), "connection %d still open" % k
        assert time.time() - t0 > 0.95  # closed by the timeout, not at once
    finally:
        for c in socks:
            c.close()
        assert s.stop() == 0
