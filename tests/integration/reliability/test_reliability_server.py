"""Issue 16, the server: only its own host names, bodies of a few MB, garbled requests a 400 with one line,
a port in use one line. A test per finding."""


import pytest
from support.cli import one_line_error, run_main



# -- the server ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_server(app_run):
    """The app over the tiny run, served in this process on a free loopback port: ``(port, app)``."""
    import threading

    from werkzeug.serving import make_server

    from dash_app.app import create_app

    server = make_server("127.0.0.1", 0, create_app([app_run.path]).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()


def request(port: int, method: str = "GET", path: str = "/", host: str | None = None, body: bytes | None = None):
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host or f"127.0.0.1:{port}", "Content-Type": "application/json"}
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    except (BrokenPipeError, ConnectionResetError):      # the server may close before reading a refused body
        return None, b""
    finally:
        connection.close()


def test_the_app_answers_only_its_own_host_names_against_dns_rebinding(local_server):
    assert request(local_server)[0] == 200
    assert request(local_server, host=f"localhost:{local_server}")[0] == 200
    assert request(local_server, host=f"[::1]:{local_server}")[0] == 200
    for forged in ("attacker.example", f"attacker.example:{local_server}", "127.0.0.1.attacker.example", "[::2]"):
        status, body = request(local_server, host=forged)
        assert status == 403 and b"--allow-host" in body, (forged, status, body)


def test_a_request_body_over_a_few_mb_is_refused_with_413(local_server):
    status, _ = request(local_server, "POST", "/_dash-update-component", body=b"x" * (5 * 1024 * 1024))
    assert status in (413, None), status            # refused before it is read (None: closed while sending)
    status, _ = request(local_server, "POST", "/_dash-update-component", body=b"{" + b" " * (3 * 1024 * 1024) + b"}")
    assert status in (413, None), status


def test_allowed_hosts_follow_the_listen_address():
    from dash_app.guard import allowed_hosts, host_name

    assert allowed_hosts() == {"127.0.0.1", "localhost", "::1"}
    assert "qkviz.lab" in allowed_hosts("qkviz.lab") and "proxy.example" in allowed_hosts(extra=("Proxy.Example",))
    assert host_name("[::1]:8050") == "::1" and host_name("LOCALHOST:80") == "localhost"


@pytest.mark.parametrize("body", [b"{}", b"[]", b"null", b'{"output": 5}', b'{"output": "nothing.children", "inputs": 3}',
                                  b"not json", b'{"output": "view-state.data", "inputs": [{"id": []}], "changedPropIds": 7}'])
def test_a_garbled_callback_request_is_a_400_not_a_500_with_a_stack_trace(local_server, body):
    status, text = request(local_server, "POST", "/_dash-update-component", body=body)
    assert 400 <= status < 500 and b"Traceback" not in text, (status, text)



def test_a_port_in_use_is_one_line(app_run):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        one_line_error(run_main("serve", "--run", app_run.path, "--port", str(port)), f"127.0.0.1:{port}",
                       "choose another --port")
