"""The app against hostile values: the state validation as a property (Hypothesis: any value becomes a valid
state), and every callback of a served app fed huge strings, wrong types, out-of-range numbers, path-like
strings and NaN through real HTTP requests -- never a 500, never a stack trace, bounded memory."""

import http.client
import json
import random
import resource
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dash_app.guard import MAX_REQUEST_BYTES
from dash_app.state.view_state import ViewState, checked_state, validate

HOSTILE = ["x" * 1_000_000, "", None, -1, 10**18, -(10**18), 1e308, 2.5, True, [], {}, [None] * 1000,
           {"a": {"b": [1, "2"]}}, "../../../etc/passwd", "nan", "NaN", float("nan"), "<script>alert(1)</script>",
           "\x00\udcff", ["substring", 7, None]]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=300),
                           lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8),
                                                                                           children, max_size=5),
                           max_leaves=20)


@pytest.fixture(scope="module")
def app_data(app_run):
    from dash_app.app import open_runs

    return open_runs([app_run.path])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from([*ViewState.__dataclass_fields__, "extra"]), JSON_VALUES, max_size=14)
       | JSON_VALUES)
def test_any_received_state_becomes_a_valid_state(app_data, received):
    state = checked_state(received, app_data)
    shape = app_data[state.run].shape
    assert validate(state, shape, ViewState(method=shape.default_method)) == state      # already valid: a fixed point
    assert isinstance(state.search, str) and len(state.search) <= 100


@pytest.fixture(scope="module")
def served(app_data):
    from werkzeug.serving import make_server

    from dash_app.app import build_app

    app = build_app(app_data)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield app, server.server_port
    server.shutdown()


def post(port: int, body: dict) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("POST", "/_dash-update-component", body=json.dumps(body).encode(),
                           headers={"Content-Type": "application/json", "Host": f"127.0.0.1:{port}"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def request_for(output: str, spec: dict, values: list) -> dict:
    """A callback request as the Dash renderer sends it, with ``values`` for the inputs, then the states."""
    inputs = [{"id": item["id"], "property": item["property"], "value": value}
              for item, value in zip(spec["inputs"], values)]
    states = [{"id": item["id"], "property": item["property"], "value": value}
              for item, value in zip(spec["state"], values[len(spec["inputs"]):])]
    outputs = [{"id": part.split(".")[0], "property": part.split(".")[1]}
               for part in output.strip(".").split("...") if "." in part]
    return {"output": output, "outputs": outputs if len(outputs) > 1 else outputs[0], "inputs": inputs,
            "state": states, "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"] if inputs else []}


def callback_request(app, output_part: str, values: list) -> tuple[str, dict, dict]:
    """``(output, spec, request)`` of the server callback whose output names ``output_part``, with ``values``."""
    output, spec = next((output, spec) for output, spec in app.callback_map.items() if output_part in output)
    return output, spec, request_for(output, spec, values)


def answered(port: int, body: dict, trigger: str) -> dict:
    """The callback's response to ``body`` sent as if ``trigger`` (``id.property``) changed; it must be a 200."""
    body["changedPropIds"] = [trigger]
    status, text = post(port, body)
    assert status == 200, text[:300]
    return json.loads(text)["response"]


def hostile_failures(port: int, output: str, spec: dict) -> list[tuple]:
    """Each input and state of one callback hostile in turn (the others ``{}``): what was not answered with 200 or
    204, or answered with a stack trace."""
    arity = len(spec["inputs"]) + len(spec["state"])
    failures = []
    for position in range(arity):
        for value in HOSTILE:
            values = [{} for _ in range(arity)]
            values[position] = value
            status, text = post(port, request_for(output, spec, values))
            if status not in (200, 204) or b"Traceback" in text:
                failures.append((output, position, repr(value)[:40], status, text[:200]))
    return failures


def test_every_callback_takes_hostile_values_as_the_nearest_valid_state_with_bounded_memory(served):
    """Every server callback, each input hostile in turn and then all at once: answered (200, or 204 when
    there is nothing to redraw), never refused with 4xx, never a 500 or a stack trace."""
    app, port = served
    callbacks = [(output, spec) for output, spec in app.callback_map.items()     # the server's (not clientside)
                 if "callback" in spec and all(isinstance(item["id"], str) for item in spec["inputs"] + spec["state"])]
    assert len(callbacks) >= 8, "the app's callbacks were not found"
    rng = random.Random(0)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    failures, sent = [], 0
    for output, spec in callbacks:
        arity = len(spec["inputs"]) + len(spec["state"])
        for position in range(arity):                      # each input hostile in turn, the others valid-ish
            for value in rng.sample(HOSTILE, 6):
                values = [{} for _ in range(arity)]
                values[position] = value
                status, text = post(port, request_for(output, spec, values))
                sent += 1
                if status not in (200, 204) or b"Traceback" in text:     # drawn, or nothing to redraw: never refused
                    failures.append((output, position, repr(value)[:40], status, text[:200]))
        body = request_for(output, spec, [rng.choice(HOSTILE) for _ in range(arity)])
        status, text = post(port, body)
        expected = (413,) if len(json.dumps(body).encode()) > MAX_REQUEST_BYTES else (200, 204)   # the guard's limit
        if status not in expected or b"Traceback" in text:
            failures.append((output, "all", "", status, text[:200]))
    assert not failures, failures[:5]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    assert grown_mb < 300, f"{sent} hostile requests grew the peak memory by {grown_mb:.0f} MB"
