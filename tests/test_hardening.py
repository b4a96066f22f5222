"""The public Space's front door (issue 43): path errors explained, malformed calls refused with 4xx,
the public URL not taken from the Host header, and the upload folder and rate bounded.

The app runs in this process on the tiny preset of `test_reliability`, driven over plain HTTP.
"""

import dataclasses
import os
import time
from pathlib import Path

import httpx
import pytest
import tiny
from test_reliability import PRESET, args, page_args, raw_call, serve, uploaded

from demo import session
from demo.lab.bench import soak
from demo.models import presets
from demo.page import server
from demo.serve import guard
from demo.session import budget, validate
from demo.session.validate import InvalidInput

MIB = 2**20


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The tiny preset saved to disk, and two images (as `test_reliability`'s)."""
    yield from tiny.saved_world(tmp_path_factory, "hardening", PRESET)


@pytest.fixture(scope="module")
def app(world):
    demo = serve()
    yield demo
    demo.close()


def test_a_nul_byte_in_an_image_path_gets_a_sentence_on_both_endpoints(app, world):
    image = uploaded(app, world / "images" / "0.png")
    nul = {**image, "path": image["path"] + "\x00.png"}
    sentence = validate.unusable_path(ValueError("embedded null byte"))
    assert sentence.startswith("The image's path cannot be used: it holds a NUL byte (\\x00)")
    assert raw_call(app, "trace", [nul, *args(world)[1:]])["output"]["error"] == sentence
    assert raw_call(app, "race", page_args(nul))["output"]["error"] == sentence
    with pytest.raises(InvalidInput, match="NUL byte"):
        validate.image_path({"path": image["path"] + "\x00"}, "/tmp")


def test_an_image_path_the_file_system_cannot_resolve_gets_a_sentence(tmp_path):
    os.symlink(tmp_path / "a", tmp_path / "b")
    os.symlink(tmp_path / "b", tmp_path / "a")
    with pytest.raises(
        InvalidInput, match=r"^The image's path cannot be used: it could not be resolved \(RuntimeError"
    ):
        validate.image_path(str(tmp_path / "a"), tmp_path)
    long = str(tmp_path / ("x" * 300))
    with pytest.raises(
        InvalidInput, match=r"could not be resolved \(OSError: \[Errno 36\] File name too long\)\."
    ) as refused:
        validate.image_path(long, tmp_path)
    assert str(tmp_path) not in str(refused.value) and "xxx" not in str(refused.value)  # no server path echoed
    looped = validate.unusable_path(RuntimeError(f"Symlink loop from '{tmp_path / 'a'}'"))
    assert str(tmp_path) not in looped and "(RuntimeError: Symlink loop from …)" in looped


def test_a_queue_join_naming_no_function_is_refused_with_422(app):
    url = app.local_url.rstrip("/") + "/gradio_api/queue/join"
    for fn_index in (9999, -1, "a"):
        response = httpx.post(url, json={"data": [], "fn_index": fn_index, "session_hash": "h"})
        assert response.status_code == 422
        assert response.json()["detail"].startswith(f"No function has fn_index {fn_index!r}; the API's are ")
        assert "/trace" in response.json()["detail"] and "/on_example" not in response.json()["detail"]
    for body in ("[]", "not json", '"text"'):
        response = httpx.post(url, content=body, headers={"content-type": "application/json"})
        assert response.status_code in (400, 422)


def test_a_direct_call_with_the_wrong_number_of_values_is_refused_with_422(app):
    base = app.local_url.rstrip("/") + "/gradio_api/run/"
    response = httpx.post(base + "race", json={"data": []})
    assert response.status_code == 422
    assert response.json()["detail"] == server.arity_refusal(
        next(fn for fn in app.fns.values() if fn.api_name == "race"), 0
    )
    assert response.json()["detail"].startswith("/race takes 13 values (the last 2 may be left out), in this order:")
    assert httpx.post(base + "trace", json={"data": ["x"]}).status_code == 422
    missing = httpx.post(base + "nothing-here", json={"data": []})
    assert missing.status_code == 404 and missing.json()["detail"].startswith("There is no endpoint /nothing-here;")
    calls = app.local_url.rstrip("/") + "/gradio_api/call/race"
    for body in ({}, {"data": None}, {"data": "x"}):
        assert httpx.post(calls, json=body).status_code == 422  # Gradio's own check of the body


def test_a_direct_run_of_a_queued_endpoint_is_refused_with_the_way_into_the_queue(app, world):
    """A direct /run would skip the queue, and every visitor's share of it (issue 54): a valid call,
    one with a bad value and one naming the race by fn_index all get 403 and the way in."""
    image = uploaded(app, world / "images" / "0.png")
    good = [image, *args(world)[1:]]
    bad = list(good)
    bad[4] = "x"  # gamma
    base = app.local_url.rstrip("/") + "/gradio_api/run/"
    race = next(i for i, fn in app.fns.items() if fn.api_name == "race")
    for url, body in (
        (base + "trace", {"data": good}),
        (base + "trace", {"data": bad}),
        (base + "predict", {"data": page_args(image), "fn_index": race, "session_hash": "h"}),
    ):
        response = httpx.post(url, json=body)
        assert response.status_code == 403, response.text
        name = "race" if "predict" in url else "trace"
        assert response.json()["detail"] == (
            f"/{name} runs in the queue, one request at a time, so that every visitor gets a turn: call it "
            f"through the queue (gradio_client, or POST /gradio_api/call/{name} and then GET its result), "
            "not as a direct /run call."
        )


def test_a_direct_call_of_a_small_event_that_fails_on_its_values_gets_422_not_500(app):
    """The page's unqueued events are direct calls; Gradio answers any failure of one 500."""
    fns = {getattr(fn.fn, "__name__", ""): i for i, fn in app.fns.items() if not fn.queue}
    url = app.local_url.rstrip("/") + "/gradio_api/run/predict"
    response = httpx.post(url, json={"data": ["x", 8], "fn_index": fns["on_preset"], "session_hash": "h"})
    assert response.status_code == 422, response.text  # the value Gradio refused, in its own words
    assert response.json()["detail"].startswith("Value: x is not in the list of choices: [")
    response = httpx.post(url, json={"data": [None], "fn_index": fns["on_example"], "session_hash": "h"})
    assert response.status_code == 422, response.text  # a failure without a sentence: the guard's
    assert response.json() == {"detail": "These values cannot be used by this function."}


def test_a_deeply_nested_body_and_fn_index_true_get_4xx_with_a_sentence(app):
    base = app.local_url.rstrip("/") + "/gradio_api/"
    nested = b"[" * 10_000 + b"]" * 10_000
    for path in ("queue/join", "run/trace", "call/trace"):
        response = httpx.post(base + path, content=nested, headers={"content-type": "application/json"})
        assert response.status_code == 400, (path, response.text)
        assert response.json()["detail"] == (
            "The body is nested too deeply: send an object with the call's values as a list under 'data'."
        )
    inside = b'{"data": ' + nested + b', "fn_index": 1, "session_hash": "h"}'  # deep within an object
    assert httpx.post(base + "queue/join", content=inside).status_code == 400
    for fn_index in (True, False, 1.0):
        response = httpx.post(base + "queue/join", json={"data": [], "fn_index": fn_index, "session_hash": "h"})
        assert response.status_code == 422, fn_index
        assert response.json()["detail"].startswith(f"No function has fn_index {fn_index!r}; the API's are ")


def test_the_pages_own_unqueued_events_pass_the_guard_by_fn_index(app):
    """The page calls its unqueued events (an example picked, a checkbox ticked) as /run/predict
    with a fn_index: the guard lets them through to the app, and still checks their values."""
    fn_index = next(i for i, fn in app.fns.items() if getattr(fn.fn, "__name__", "") == "visible")
    url = app.local_url.rstrip("/") + "/gradio_api/run/predict"
    response = httpx.post(url, json={"data": [True], "fn_index": fn_index, "session_hash": "h"})
    assert response.status_code == 200
    assert response.json()["data"][0]["visible"] is True
    assert httpx.post(url, json={"data": [], "fn_index": fn_index, "session_hash": "h"}).status_code == 422


def test_the_public_url_is_not_taken_from_the_host_header(app):
    response = httpx.get(app.local_url.rstrip("/") + "/config", headers={"Host": "evil.example:666"})
    assert response.json()["root"] == app.local_url.rstrip("/")
    page = httpx.get(app.local_url, headers={"Host": "evil.example:666", "X-Forwarded-Host": "evil.example"})
    assert "evil.example" not in page.text


def test_the_public_url_is_the_spaces_on_a_space_and_unknown_on_every_interface(monkeypatch):
    monkeypatch.delenv("GRADIO_ROOT_PATH", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert server.public_root("127.0.0.1", 7861) == "http://127.0.0.1:7861"
    assert server.public_root("::1", 7861) == "http://[::1]:7861"
    assert server.public_root("0.0.0.0", 7861) is None
    monkeypatch.setenv("SPACE_ID", "someone/spd")
    monkeypatch.setenv("SPACE_HOST", "someone-spd.hf.space")
    assert server.public_root("0.0.0.0", 7860) == "https://someone-spd.hf.space"
    monkeypatch.setenv("GRADIO_ROOT_PATH", "https://example.org/spd")
    assert server.public_root("0.0.0.0", 7860) is None  # Gradio reads the variable itself


# --- uploads ----------------------------------------------------------------------------------


def test_the_rate_limit_admits_a_clients_bytes_per_minute_and_says_when_more_fit():
    rate = guard.RateLimit(per_minute=20)
    assert rate.admit("a", 9, now=0.0) == 0 and rate.admit("a", 9, now=10.0) == 0
    assert rate.admit("a", 9, now=20.0) == pytest.approx(40.0)  # the first upload leaves the minute at 60 s
    assert rate.admit("b", 9, now=20.0) == 0  # another client has its own minute
    assert rate.admit("a", 9, now=60.0) == 0
    assert rate.admit("c", 50, now=0.0) == 0  # one upload larger than the rate still passes, alone


@pytest.fixture
def capped(world, tmp_path):
    """The app with a 30 MiB upload folder and 22 MiB a minute per client, on its own cache folder."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GRADIO_TEMP_DIR", str(tmp_path / "cache"))
        env.setenv(guard.UPLOAD_FOLDER_ENV, "30")
        env.setenv(guard.UPLOAD_RATE_ENV, "22")
        demo = serve()
        yield demo, tmp_path / "cache"
        demo.close()


def guard_of(demo) -> guard.Guard:
    """The running app's Guard, found down its middleware stack."""
    layer = demo.app.middleware_stack
    while not isinstance(layer, guard.Guard):
        layer = layer.app
    return layer


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_the_upload_folder_stays_under_its_cap_oldest_deleted_first_and_a_client_is_rate_limited(capped, tmp_path):
    demo, cache = capped
    url = demo.local_url.rstrip("/") + "/gradio_api/upload"
    sent, peak = [], 0
    with httpx.Client(timeout=60) as http:
        for i in range(9):
            body = os.urandom(5 * MIB)
            response = http.post(url, files={"files": (f"{i}.bin", body)})
            if i == 4:  # 4 x 5 MiB fit in 22 MiB a minute; the fifth waits its turn
                assert response.status_code == 429
                assert response.json()["detail"].startswith(
                    "Too many uploads: each visitor may upload 22 MiB a minute."
                )
                assert 1 <= int(response.headers["retry-after"]) <= 60
                guard_of(demo).rate.sent.clear()  # a minute later, as far as the limiter knows
                continue
            assert response.status_code == 200
            sent.append(response.json()[0])
            time.sleep(0.3)  # Gradio moves the upload into the folder after answering
            peak = max(peak, folder_bytes(cache))
    assert peak <= 30 * MIB + 5 * MIB
    present = [Path(p).exists() for p in sent]
    assert present[-1] and not present[0]  # the oldest went first
    assert present == sorted(present)  # deleted files are all older than kept ones
    too_big = httpx.post(url, files={"files": ("big.bin", b"x" * (12 * MIB))})
    assert too_big.status_code == 413


# --- the work budget, served ----------------------------------------------------------------------


def test_a_request_over_the_budget_runs_shortened_and_says_so_and_one_that_cannot_is_refused(app, world, monkeypatch):
    monkeypatch.setenv(budget.BUDGET_ENV, "1")
    image = uploaded(app, world / "images" / "0.png")
    done = raw_call(app, "trace", [image, *args(world, max_new=400)[1:]])
    payload = done["output"]["data"][0]
    runs = payload["settings"]["max_new_tokens"]
    assert runs < 400 and payload["shortened"] == (
        f"{runs} of the 400 tokens you asked for fit in the 1 s a request may take, so the race runs {runs}."
    )
    assert all(len(lane["trace"]["tokens"]) <= runs for lane in payload["runs"].values())
    monkeypatch.setenv(budget.BUDGET_ENV, "0.01")  # not even 16 tokens: 10 steps at the tiny preset's 1 ms
    expected = "This race asks for 2 lanes x 400 new tokens (text-only at γ 4, greedy), and not even its smallest"
    assert raw_call(app, "trace", [image, *args(world, max_new=400)[1:]])["output"]["error"].startswith(expected)
    page = raw_call(app, "race", [*page_args(image)[:9], 400, 0.5, "none", False])
    assert page["output"]["error"].startswith(expected)


def test_a_race_that_outlives_its_budget_stops_over_budget_and_keeps_what_it_made(app, world, monkeypatch):
    monkeypatch.setenv(budget.BUDGET_ENV, "1")  # every request's own limit is at most 1 s
    cheap = dataclasses.replace(presets.PRESETS[PRESET], cpu_seconds_per_token=1e-5)  # so that it is admitted
    monkeypatch.setitem(presets.PRESETS, PRESET, cheap)
    image = uploaded(app, world / "images" / "0.png")
    started = time.monotonic()
    done = raw_call(app, "trace", [image, *args(world, max_new=480)[1:], "image-aware"])
    took = time.monotonic() - started
    assert done["success"], done["output"]
    payload = done["output"]["data"][0]
    assert payload["stopped"] == budget.OVER_BUDGET
    made = {lane: len(run["trace"]["tokens"]) for lane, run in payload["runs"].items()}
    assert list(made) == ["speculative", "speculative-2", "autoregressive"]
    assert sum(made.values()) > 0 and min(made.values()) < 480  # what it made is kept; not all of it
    assert not all(run["trace"]["summary"] for run in payload["runs"].values())
    assert "comparisons" not in payload and took < 1 + 10, (made, took)


def test_a_race_completes_within_its_budget_plus_10_s_while_a_maximal_analysis_runs(app, world, monkeypatch):
    from gradio_client import handle_file

    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    analyst = soak.client(app.local_url)
    analysis = analyst.submit(PRESET, "all", "both, side by side", 4, 32, 0, "en", api_name="/analysis")
    deadline = time.monotonic() + 60
    while not analysis.outputs() and time.monotonic() < deadline:  # its first update: it is decoding
        time.sleep(0.2)
    assert analysis.outputs(), "the analysis did not start"
    request = session.parse(question=args(world)[1], preset=PRESET, drafter="text-only", max_new_tokens=8)
    own = budget.limit(budget.race(request))
    racer = soak.client(app.local_url)
    started = time.monotonic()
    result = racer.predict(handle_file(str(world / "images" / "0.png")), *args(world)[1:], api_name="/trace")
    took = time.monotonic() - started
    running = not analysis.done()
    analysis.cancel()
    assert result["settings"]["max_new_tokens"] == 8 and "stopped" not in result
    assert took <= own + 10, f"the race took {took:.1f} s beside the analysis; its budget is {own:.0f} s"
    assert running, "the analysis ended before the race: nothing ran concurrently"
    print(f"race beside a maximal analysis: {took:.1f} s (its budget {own:.0f} s)")


def test_seed_null_is_refused_alike_on_every_endpoint_and_a_list_is_no_drafter_name(app, world):
    image = uploaded(app, world / "images" / "0.png")
    sampled = [image, *args(world)[1:]]
    sampled[5], sampled[8] = False, None  # greedy, seed
    refusal = "seed must be a whole number from 0 to 4294967295; got None."
    assert raw_call(app, "trace", sampled)["output"]["error"] == refusal
    page = page_args(image)
    page[5], page[8] = False, None  # greedy, seed
    assert raw_call(app, "race", page)["output"]["error"] == refusal
    analysis = raw_call(app, "analysis", [PRESET, "caption", "text-only", 4, 1, None, "en"])
    assert analysis["output"]["error"] == "example set (seed) " + refusal.removeprefix("seed ")  # ran as seed 0
    refused = raw_call(app, "trace", [image, *args(world)[1:], [4]])["output"]["error"]
    assert refused.startswith("The second drafter must be one drafter's name, not a list; got [4]. Choose one of:")


def test_the_server_keeps_the_64_most_recent_visitors_sessions(app):
    import uuid

    assert app.state_session_capacity == server.SESSIONS == 64
    holder = app.state_holder
    hashes = [uuid.uuid4().hex for _ in range(server.SESSIONS + 5)]
    for key in hashes:
        holder[key]  # a visitor's first request makes its session
    assert len(holder.session_data) == server.SESSIONS  # Gradio's default would have kept 10,000
    assert hashes[0] not in holder and hashes[-1] in holder  # the least recently used went first
