"""`dashboard --serve` answers only requests that name the address it binds (no DNS rebinding).

A page of another site whose name an attacker re-points at 127.0.0.1 can make the user's browser send
requests to the server, but they carry that site's name in ``Host``: they must get no data. Tested
on a real server on 127.0.0.1 (a free port), with http.client sending forged ``Host`` headers.
"""

from __future__ import annotations

import http.client
import json

import pytest

from eve_search.dashboard import dashboard_data, start_server


@pytest.fixture
def server(sweep_store):
    url, _ = sweep_store
    server, thread = start_server(url, 0, interval=1)
    try:
        yield server, url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert not thread.is_alive()


def request(port: int, path: str, host: str | None) -> tuple[int, str]:
    """GET ``path`` from 127.0.0.1:``port`` with exactly this ``Host`` header (None: no header)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_host=True)
        if host is not None:
            connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


@pytest.mark.parametrize("name", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}"])
def test_the_bound_address_is_answered(server, name):
    server, url = server
    port = server.server_address[1]
    status, body = request(port, "/data.json", name.format(port=port))
    assert status == 200 and json.loads(body) == dashboard_data(url)
    status, page = request(port, "/", name.format(port=port))
    assert status == 200 and "adult-hp-eve-seed0" in page


@pytest.mark.parametrize("name", [
    "attacker.example:{port}",  # DNS rebinding: the attacker's name, re-pointed at 127.0.0.1
    "attacker.example",
    "127.0.0.1.attacker.example:{port}",
    "localhost.attacker.example:{port}",
    "127.0.0.1:{other}",  # another port: not this server's address
    "localhost",  # no port: only port 80 leaves it out
    "127.0.0.1",
    "[::1]:{port}",  # IPv6 loopback: the server does not bind it
    "0.0.0.0:{port}",
    "",
    None,  # no Host header at all
])
def test_any_other_host_gets_no_data(server, name):
    server, _ = server
    port = server.server_address[1]
    host = None if name is None else name.format(port=port, other=port + 1 if port < 65535 else port - 1)
    for path in ["/data.json", "/", "/index.html", "/favicon.ico", "/etc/passwd"]:
        status, body = request(port, path, host)
        assert status == 421, path
        assert "adult-hp" not in body and "{" not in body and "misdirected request" in body
