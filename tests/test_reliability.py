"""The served app under bad input, load, cancellation and faults, and its security defaults.

The app runs in this process on a tiny random-weight preset saved to disk (`tiny.save_preset`),
and is driven through its real HTTP API: gradio_client, or raw HTTP where a client would refuse
to send the request. Figures the README quotes (concurrent clients, the queue bound, the
cancellation latency) are printed by the tests that measure them (`pytest -s`).

torch runs on one thread here: on this shared two-core machine two threads were 5-10x slower.
"""

import json
import math
import os
import shutil
import statistics
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import gradio.routes
import gradio.utils
import httpx
import numpy as np
import pytest
import tiny
import torch
from gradio_client import handle_file
from gradio_client.exceptions import AppError
from gradio_client.utils import QueueError
from PIL import Image
from test_validate import png_bytes

from demo.engine import drafters, speculative, sweep
from demo.engine.events import RoundEvent
from demo.lab.bench import soak
from demo.models import loader, presets
from demo.page import handlers, runs, server, strategy_table
from demo.serve import guard
from demo.session import budget, lane_runs, offers, validate

PRESET = "tiny-reliability"
ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ("Describe the image.", "What colour is the circle?")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The tiny preset saved to disk, and two images."""
    yield from tiny.saved_world(tmp_path_factory, "reliability", PRESET)


def serve(queue_size: int = server.QUEUE_SIZE):
    name = os.environ.pop("GRADIO_SERVER_NAME", None)  # the defaults are under test
    # This module's tests upload from one address faster than any visitor (refusals come back in
    # milliseconds): the files a visitor may upload a minute are lifted, unless a test sets them
    files = guard.UPLOAD_FILES_ENV not in os.environ
    if files:
        os.environ[guard.UPLOAD_FILES_ENV] = "1000000"
    try:
        demo = server.build_demo(default_preset=PRESET)
        server.launch(demo, warm=None, queue_size=queue_size, prevent_thread_lock=True, quiet=True)
    finally:
        if name is not None:
            os.environ["GRADIO_SERVER_NAME"] = name
        if files:
            del os.environ[guard.UPLOAD_FILES_ENV]
    return demo


@pytest.fixture(scope="module")
def app(world):
    demo = serve()
    yield demo
    demo.close()


@pytest.fixture(scope="module")
def client(app):
    return soak.client(app.local_url)


def args(world, image="0.png", question=QUESTIONS[0], preset=PRESET, drafter="text-only", max_new=8, **change):
    """The /trace arguments: image, question, preset, drafter, gamma, greedy, temperature, top_p,
    seed, max_new_tokens, min_confidence. `image` names a file of the world's images, or is the value sent."""
    image = handle_file(str(world / "images" / image)) if isinstance(image, str) else image
    values = dict(gamma=4, greedy=True, temperature=0.8, top_p=0.95, seed=0, min_confidence=0.0, **change)
    return (
        image,
        question,
        preset,
        drafter,
        values["gamma"],
        values["greedy"],
        values["temperature"],
        values["top_p"],
        values["seed"],
        max_new,
        values["min_confidence"],
    )


def page_args(image, question=QUESTIONS[0], drafter="text-only") -> list:
    """The /race (the page's) arguments: /trace's (image, question, preset, drafter, gamma, greedy,
    temperature, top_p, seed, max_new_tokens, min_confidence), then second_drafter and the page-only
    adaptive."""
    return [image, question, PRESET, drafter, 4, True, 0.8, 0.95, 0, 8, 0.5, "none", False]


def token_ids(result: dict) -> dict:
    return {run: result["runs"][run]["trace"]["summary"]["token_ids"] for run in ("speculative", "autoregressive")}


def refusal(client, *call) -> str:
    with pytest.raises(AppError) as refused:
        client.predict(*call, api_name="/trace")
    return str(refused.value)


def raw_call(app, api_name: str, data: list) -> dict:
    """One queued call over plain HTTP, as any client could send it: the completion message."""
    fn_index = next(i for i, fn in app.fns.items() if fn.api_name == api_name)
    session = uuid.uuid4().hex
    url = app.local_url.rstrip("/") + "/gradio_api/queue"
    with httpx.Client(timeout=30) as http:
        http.post(f"{url}/join", json={"data": data, "fn_index": fn_index, "session_hash": session}).raise_for_status()
        with http.stream("GET", f"{url}/data?session_hash={session}") as stream:
            for line in stream.iter_lines():
                if line.startswith("data:") and json.loads(line[5:])["msg"] == "process_completed":
                    return json.loads(line[5:])
    raise AssertionError("the stream ended without a result")


def uploaded(app, path: Path) -> dict:
    with httpx.Client() as http:
        response = http.post(app.local_url.rstrip("/") + "/gradio_api/upload", files={"files": path.open("rb")})
    return {"path": response.json()[0], "meta": {"_type": "gradio.FileData"}}


# --- bad input through the API ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("notes.png", b"just some text\n", "That file is not an image this demo can read."),
        ("cut.png", png_bytes(64, 64, bytes(range(256)) * 17)[:300], "The image file is damaged or truncated"),
        (
            "huge.png",
            png_bytes(20_000, 20_000),
            "The image is too large to decode safely; the limit is 16,777,216 pixels",
        ),
        (
            "bomb.png",
            png_bytes(6000, 6000, b"\0" * 6001 * 6000),
            "The image is 6,000 x 6,000 pixels (36,000,000 in all)",
        ),
        ("strip.png", png_bytes(2000, 20), "The image is 2000 x 20 pixels; its longer side may be at most 20 times"),
    ],
    ids=["text", "truncated", "20000x20000", "decompression-bomb", "narrow-strip"],
)
def test_bad_image_files_are_refused_through_the_api(client, world, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    assert refusal(client, *args(world, image=handle_file(str(path)))).startswith(message)


def test_no_image_is_refused_on_both_endpoints(client, world):
    assert refusal(client, *args(world, image=None)) == validate.NO_IMAGE
    job = client.submit(None, QUESTIONS[0], PRESET, "text-only", 4, True, 0.8, 0.95, 0, 8, api_name="/race")
    with pytest.raises(AppError, match="^Add an image first"):
        job.result()
    assert "Add an image first" in job.outputs()[-1][4]  # shown where the outcome goes, too


def converted_pairs(tmp_path: Path) -> list[tuple[Path, Image.Image]]:
    """Files in other modes, each with the RGB image it must decode to."""
    red, blue = Image.new("RGB", (32, 32), (255, 0, 0)), Image.new("RGB", (32, 32), (0, 0, 255))
    red.save(tmp_path / "anim.gif", save_all=True, append_images=[blue], duration=50)
    rgba = Image.new("RGBA", (32, 32), (0, 0, 255, 0))
    rgba.paste((255, 0, 0, 255), (0, 0, 16, 32))
    rgba.save(tmp_path / "alpha.png")
    half = Image.new("RGB", (32, 32), (255, 255, 255))
    half.paste((255, 0, 0), (0, 0, 16, 32))
    grey = np.tile(np.arange(32, dtype=np.uint16) * 2056, (32, 1))  # 0 .. 63736 in 16 bits
    Image.frombytes("I;16", (32, 32), grey.tobytes()).save(tmp_path / "deep.png")
    eight = Image.fromarray(np.rint(grey / 257).astype(np.uint8), "L").convert("RGB")
    Image.new("CMYK", (32, 32), (0, 255, 255, 0)).save(tmp_path / "print.tif")
    return [
        (tmp_path / "anim.gif", red),
        (tmp_path / "alpha.png", half),
        (tmp_path / "deep.png", eight),
        (tmp_path / "print.tif", red),
    ]


def test_converted_images_give_the_same_answer_as_their_rgb_equivalent(client, world, tmp_path):
    for path, rgb in converted_pairs(tmp_path):
        rgb.save(tmp_path / f"{path.stem}-rgb.png")
        got = client.predict(*args(world, image=handle_file(str(path)), max_new=6), api_name="/trace")
        want = client.predict(
            *args(world, image=handle_file(str(tmp_path / f"{path.stem}-rgb.png")), max_new=6), api_name="/trace"
        )
        assert token_ids(got) == token_ids(want), path.name


@pytest.mark.slow
def test_a_question_too_long_for_the_context_is_refused_with_the_numbers(client, world):
    long = " ".join(["Describe every shape and colour of the scene in detail."] * 60)  # ~3,400 characters
    message = refusal(client, *args(world, question=long))
    assert message.startswith("Too long for the target: the question and image take ")
    assert message.endswith("but its context holds 512. To fit, shorten the question.")
    n_prompt = int(message.split(" take ")[1].split()[0])
    assert n_prompt > 512
    fits = (
        512
        - client.predict(*args(world, max_new=1), api_name="/trace")["runs"]["speculative"]["trace"]["prefill"][
            "prompt_tokens"
        ]
    )
    assert refusal(client, *args(world, max_new=fits + 1)).endswith(
        f"{fits + 1 + (512 - fits)} in all, but its context holds 512. To fit, lower max new tokens to {fits} or less, "
        "or shorten the question."
    )
    assert token_ids(client.predict(*args(world, max_new=fits), api_name="/trace"))  # exactly full: runs


@pytest.mark.parametrize(
    "position, value, message",
    [
        (1, ["a list"], "The question must be text; got ['a list']."),
        (2, None, "Unknown model preset: None."),
        (3, 7, "Unknown drafter for preset 'tiny-reliability': 7."),
        (4, "four", "gamma (drafts per round) must be a whole number from 1 to 10; got 'four'."),
        (5, "yes", "greedy must be true or false; got 'yes'."),
        (6, {"t": 1}, "temperature must be a number in [0.01, 5]; got {'t': 1}."),
        (8, 1.5, "seed must be a whole number from 0 to 4294967295; got 1.5."),
        (9, None, "max new tokens must be a whole number from 1 to 512; got None."),
        (
            10,
            -0.1,
            "threshold (stop drafting below this drafter confidence; min_confidence on /trace; 0 = off) must be a number in [0, 1]; got -0.1.",
        ),
    ],
)
def test_wrongly_typed_values_get_a_message_naming_the_value(client, world, position, value, message):
    call = list(args(world))
    call[position] = value
    assert refusal(client, *call).startswith(message)


def test_the_pages_endpoint_takes_greedy_as_trace_does(client, world):
    call = (*args(world)[:5], "beam", *args(world)[6:10])
    with pytest.raises(AppError, match=r"^greedy must be true or false; got 'beam'\.$"):
        client.predict(*call, api_name="/race")


def test_a_request_cannot_read_a_server_file(app, client, world):
    passwd = {"path": "/etc/passwd"}  # no Gradio file marker: only demo.session.validate stands in the way
    done = raw_call(app, "trace", [passwd, *args(world)[1:]])
    assert not done["success"] and done["output"]["error"] == validate.NOT_UPLOADED
    marked = {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}  # Gradio refuses it first
    done = raw_call(app, "trace", [marked, *args(world)[1:]])
    assert not done["success"] and "root:" not in json.dumps(done)
    for path in ("/etc/passwd", str(ROOT / "app.py"), "app.py"):
        assert httpx.get(app.local_url.rstrip("/") + "/gradio_api/file=" + path).status_code == 403


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../../etc/passwd", "file:///etc/passwd", "http://127.0.0.1:9/x.png", "https://example.com/x.png"],
)
@pytest.mark.parametrize("api_name", ["trace", "race"])
def test_an_image_that_is_a_server_path_or_a_url_is_refused_with_the_apps_sentence(app, world, path, api_name):
    marked = {"path": path, "meta": {"_type": "gradio.FileData"}}  # as a file Gradio would move or fetch
    call = [marked, *args(world)[1:]] if api_name == "trace" else page_args(marked)
    done = raw_call(app, api_name, call)
    assert not done["success"] and done["output"]["error"] == validate.NOT_UPLOADED


def test_too_few_values_are_refused_with_the_endpoints_parameters_in_order(app):
    done = raw_call(app, "trace", [])
    assert done["output"]["error"] == (
        "/trace takes 12 values (the last may be left out), in this order: image, question, preset, drafter, gamma, "
        "greedy, temperature, top_p, seed, max_new_tokens, min_confidence, second_drafter; it got 0. gradio_client "
        "fills in the defaults of any left out."
    )
    assert raw_call(app, "race", ["x"])["output"]["error"].startswith(
        "/race takes 13 values (the last 2 may be left out), in this order: image,"
    )


def test_the_page_pop_up_shows_a_message_as_typed_and_trace_returns_it_plain(app, world):
    assert handlers.page_error("a <image> & b").message == "a &lt;image&gt; &amp; b"  # the toast renders HTML
    image = uploaded(app, world / "images" / "0.png")
    bad = args(world, image=image, drafter="<i>x</i>")
    names = "text-only, text-only+tree, image-aware, image-aware+tree, prompt-lookup, staged"  # staged: a text-only drafter drafted by lookup
    assert raw_call(app, "trace", list(bad))["output"]["error"] == (
        f"Unknown drafter for preset {PRESET!r}: '<i>x</i>'. Choose one of: {names}."
    )
    assert raw_call(app, "race", page_args(image, drafter="<i>x</i>"))["output"]["error"] == (
        f"Unknown drafter for preset {PRESET!r}: '&lt;i&gt;x&lt;/i&gt;'. Choose one of: {names}."
    )


def test_the_api_lists_every_offered_presets_drafters(app):
    info = app.get_api_info()["named_endpoints"]
    offered, _ = offers.offered(PRESET)  # the tiny preset, and the embedded one where its files are here
    every = sorted({name for preset in offered for name in presets.PRESETS[preset].drafter_names()})
    assert {"image-aware", "image-aware+tree", "prompt-lookup", "text-only", "text-only+tree"} <= set(every)
    for endpoint in ("/race", "/trace"):
        parameters = {p["parameter_name"]: p for p in info[endpoint]["parameters"]}
        assert parameters["drafter"]["type"]["enum"] == every
        assert parameters["second_drafter"]["type"]["enum"] == ["none", *every]
        assert parameters["second_drafter"]["parameter_default"] == "none"  # one speculative lane, as before


def test_a_call_written_before_the_second_drafter_existed_still_races_one_lane(app, world):
    image = uploaded(app, world / "images" / "0.png")
    done = raw_call(app, "trace", [image, *args(world)[1:]])  # 11 values, as /trace took them
    assert done["success"] and list(done["output"]["data"][0]["runs"]) == ["speculative", "autoregressive"]
    done = raw_call(app, "race", page_args(image))  # every value /race takes
    assert done["success"]


def test_uploads_over_the_size_limit_are_refused(app, client, world, tmp_path):
    path = tmp_path / "large.png"
    path.write_bytes(b"\x89PNG" + b"\0" * validate.MAX_FILE_BYTES)
    with httpx.Client() as http:
        response = http.post(app.local_url.rstrip("/") + "/gradio_api/upload", files={"files": path.open("rb")})
    assert response.status_code == 413
    with pytest.raises(ValueError, match="exceeds the maximum file size of 10485760 bytes"):
        client.predict(*args(world, image=handle_file(str(path))), api_name="/trace")


# --- load -------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("n", [40])
def test_concurrent_clients_each_get_the_solo_result_or_a_full_queue_at_once(app, client, world, monkeypatch, n):
    """`n` visitors at once, each from its own address (as a Space's proxy reports them: each visitor
    may hold only one running and one waiting race, `demo.serve.visitors`): each gets the result it
    gets alone, token for token, or (beyond the queue's QUEUE_SIZE) is told at once that it is full.
    40 visitors cover the 16 this also ran (9 s): at least QUEUE_SIZE (32) of them must be served,
    each with its solo result, so the visitors up to the queue's size all are."""
    requests = [
        args(
            world,
            image=f"{i % 2}.png",
            question=QUESTIONS[i // 2],
            drafter=("text-only", "image-aware")[i % 2],
            max_new=16,
        )
        for i in range(4)
    ]
    solo = [token_ids(client.predict(*r, api_name="/trace")) for r in requests]
    monkeypatch.setenv("SPACE_ID", "someone/spd")

    def one(i: int) -> tuple[dict | None, float]:
        # Many at once keep the server's threads busy: a call may wait longer than httpx's default
        # for its answer (each race also replays every strategy for its table), which is not a failure.
        patient = soak.client(app.local_url, headers={"X-Forwarded-For": f"198.51.100.{i + 1}"})
        started = time.perf_counter()
        try:
            return token_ids(patient.predict(*requests[i % 4], api_name="/trace")), time.perf_counter() - started
        except QueueError:
            return None, time.perf_counter() - started

    started = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    served = [i for i, (result, _) in enumerate(results) if result is not None]
    full = [took for result, took in results if result is None]
    print(
        f"\n{n} concurrent clients: {len(served)} served, all in {time.perf_counter() - started:.1f} s; "
        f"{len(full)} told the queue is full" + (f" in {max(full):.2f} s at most" if full else "")
    )
    assert [results[i][0] for i in served] == [solo[i % 4] for i in served]
    assert all(results[i][0]["speculative"] == results[i][0]["autoregressive"] for i in served)  # greedy: lossless
    assert len(served) >= min(n, server.QUEUE_SIZE)
    assert all(took < 10 for took in full)  # told at once, not after a wait


@pytest.fixture
def gate(monkeypatch):
    """Hold every race at its start until `gate.open` is set; `gate.entered` says one is held."""
    held = threading.Event()
    release = threading.Event()
    race = lane_runs.race

    def gated(lanes):
        held.set()
        release.wait(30)
        yield from race(lanes)

    monkeypatch.setattr(lane_runs, "race", gated)
    yield type("Gate", (), {"entered": held, "open": release})
    release.set()


@pytest.mark.slow
def test_beyond_the_queue_bound_callers_are_told_at_once_that_it_is_full(world, gate):
    demo = serve(queue_size=2)
    layer = demo.app.middleware_stack  # one client sends them all: lift its visitor's share of the queue
    while not hasattr(layer, "share"):
        layer = layer.app
    layer.share.most = 10
    try:
        client = soak.client(demo.local_url)
        running = client.submit(*args(world), api_name="/trace")
        assert gate.entered.wait(30)
        waiting = [client.submit(*args(world), api_name="/trace") for _ in range(2)]
        deadline = time.perf_counter() + 10
        while len(demo._queue) < 2:
            assert time.perf_counter() < deadline, "the two requests never reached the queue"
            time.sleep(0.01)
        started = time.perf_counter()
        with pytest.raises(QueueError, match="Queue is full! Please try again."):
            client.submit(*args(world), api_name="/trace").result(timeout=10)
        refused_s = time.perf_counter() - started
        with httpx.Client() as http:
            fn_index = next(i for i, fn in demo.fns.items() if fn.api_name == "trace")
            response = http.post(
                demo.local_url.rstrip("/") + "/gradio_api/queue/join",
                json={"data": list(args(world)), "fn_index": fn_index, "session_hash": "x"},
            )
        assert response.status_code == 503 and "Queue is full" in response.text
        gate.open.set()
        assert all(token_ids(job.result(timeout=60)) for job in [running, *waiting])
        print(f"\nqueue bound 2 (served default {server.QUEUE_SIZE}): one more refused in {refused_s * 1000:.0f} ms")
    finally:
        gate.open.set()
        demo.close()


# --- cancellation -----------------------------------------------------------------------------


@pytest.fixture
def probe(monkeypatch):
    """Timestamps of every race event, of every close of a race's runs (its start, `closed`, and
    end, `done`) and of every cancel request the server received; weak references to every KV
    cache made."""
    seen = type("Probe", (), {"events": [], "rounds": [], "closed": [], "done": [], "cancels": [], "caches": []})()
    race, close, cancel_tasks = lane_runs.race, lane_runs.close, gradio.routes.cancel_tasks
    new_cache, start = speculative.Target.new_cache, drafters.Drafter.start

    def timed_race(lanes):
        for lane, event in race(lanes):
            seen.events.append(time.perf_counter())
            if isinstance(event, RoundEvent):
                seen.rounds.append((lane, seen.events[-1]))
            yield lane, event

    def timed_close(lanes):
        seen.closed.append(time.perf_counter())
        close(lanes)
        seen.done.append(time.perf_counter())

    async def timed_cancel(task_ids):
        seen.cancels.append(time.perf_counter())
        return await cancel_tasks(task_ids)

    def watched_cache(self):
        cache = new_cache(self)
        seen.caches.append(weakref.ref(cache))
        return cache

    def watched_start(self, inputs):
        state = start(self, inputs)
        seen.caches.append(weakref.ref(state.cache))
        return state

    monkeypatch.setattr(lane_runs, "race", timed_race)
    monkeypatch.setattr(lane_runs, "close", timed_close)
    monkeypatch.setattr(gradio.routes, "cancel_tasks", timed_cancel)
    monkeypatch.setattr(speculative.Target, "new_cache", watched_cache)
    monkeypatch.setattr(drafters.Drafter, "start", watched_start)
    return seen


def wait_for(condition, seconds: float = 30.0) -> None:
    deadline = time.perf_counter() + seconds
    while not condition():
        assert time.perf_counter() < deadline, "timed out"
        time.sleep(0.002)


def round_seconds(rounds: list[tuple[str, float]]) -> float:
    """The median wall time of a round of the speculative run (its rounds are the longer ones)."""
    ends = [t for lane, t in rounds if lane == "speculative"]
    return statistics.median(b - a for a, b in zip(ends, ends[1:], strict=False))


@pytest.mark.parametrize("endpoint", ["/trace", "/race"])
def test_cancelling_stops_decoding_within_a_round_and_frees_the_caches(client, world, probe, endpoint):
    call = list(args(world, max_new=400))
    job = client.submit(*call, api_name=endpoint)
    wait_for(lambda: len(probe.events) > 50)
    job.cancel()
    wait_for(lambda: probe.done)
    arrived = probe.cancels[-1]
    last_event = max(probe.events)
    time.sleep(0.2)
    stop_s, close_s = last_event - arrived, probe.closed[0] - arrived
    heartbeat = handlers.TRACE_HEARTBEAT_EVERY if endpoint == "/trace" else handlers.HEARTBEAT_EVERY
    print(
        f"\n{endpoint}: cancel received -> last event {stop_s * 1000:.0f} ms, -> runs closed {close_s * 1000:.0f} ms "
        f"(a round: {round_seconds(probe.rounds) * 1000:.1f} ms, heartbeat {heartbeat * 1000:.0f} ms)"
    )
    assert len(probe.events) < 600  # the whole race would make over 1,000 events
    # Within max(one round, HEARTBEAT_EVERY) of the cancel, counted in rounds rather than seconds
    # (a busy machine makes rounds slower, not more): the round at hand, the heartbeat's worth, one more.
    # The heartbeat's worth is counted at the pace the rounds ran around the cancel where that was
    # faster than the run's median (a neighbour's load can lift: 3-6 ms rounds after a median of 12).
    ends = [t for lane, t in probe.rounds if lane == "speculative"]
    after = [t for t in ends if t > arrived]
    around = [b - a for a, b in zip(ends[-len(after) - 1 :], ends[-len(after) :])] if after else []
    pace = min(round_seconds(probe.rounds), statistics.median(around) if around else math.inf)
    assert len(after) <= 2 + heartbeat / pace, (after, pace)
    assert probe.closed[0] >= last_event and max(probe.events) == last_event  # nothing decoded after the close
    assert len(probe.caches) == 3 and all(ref() is None for ref in probe.caches)  # target x2, drafter
    after = client.predict(*args(world), api_name="/trace")
    assert token_ids(after)["speculative"] == token_ids(after)["autoregressive"]


def test_the_stop_button_ends_its_pages_race_within_an_event_and_frees_the_caches(app, world, probe):
    uploads = Path(gradio.utils.get_upload_folder()) / f"stop-{uuid.uuid4().hex}"
    uploads.mkdir(parents=True)
    shutil.copy(world / "images" / "0.png", uploads / "0.png")
    page, other = SimpleNamespace(session_hash="page"), SimpleNamespace(session_hash="another page")
    race = handlers.run_race(str(uploads / "0.png"), QUESTIONS[0], PRESET, "text-only", max_new_tokens=400, page=page)
    updates = []
    consumer = threading.Thread(target=lambda: updates.extend(race))
    consumer.start()
    wait_for(lambda: len(probe.events) > 50)
    handlers.stop_race(other)  # another page's Stop: this race goes on
    seen = len(probe.events)
    wait_for(lambda: len(probe.events) > seen + 20)
    assert not probe.closed
    pressed = time.perf_counter()
    answer = handlers.stop_race(page)
    consumer.join(10)
    shutil.rmtree(uploads)
    print(
        f"\nStop pressed -> runs closed {(probe.done[0] - pressed) * 1000:.1f} ms "
        f"(a round: {round_seconds(probe.rounds) * 1000:.1f} ms)"
    )
    assert not consumer.is_alive() and not answer["stop"].interactive and set(answer) == {"stop"}
    assert sum(t > pressed for t in probe.events) <= 2  # ended after the event at hand (one per lane at most)
    # The race says so itself, in its last update (the page gets a run's updates in order): each
    # lane's clock stopped, Run on and Stop off.
    last = updates[-1]
    assert "Stopped." in last["outcome"] and last["run"].interactive and not last["stop"].interactive
    assert "· stopped" in last["spd_panel"] and "· stopped" in last["ar_panel"]
    # the after-race record (what the check and the replay read) is this race, as far as it ran
    facts, timeline, request, raced = last["last"]
    assert request.max_new_tokens == 400 and raced == str(uploads / "0.png") and len(timeline) > 70
    assert all(ref() is None for ref in probe.caches) and len(probe.caches) == 3
    assert not any("lossless" in str(update.get("outcome")) for update in updates)  # the race never reached its end


def test_the_stop_button_ends_the_gamma_sweep_between_its_draft_lengths(app, world, monkeypatch):
    """Once every lane is done the race's call replays the answer at γ 1 … 10; Stop stays on and
    is answered between two draft lengths, not after all ten."""
    uploads = Path(gradio.utils.get_upload_folder()) / f"sweep-stop-{uuid.uuid4().hex}"
    uploads.mkdir(parents=True)
    shutil.copy(world / "images" / "0.png", uploads / "0.png")
    page = SimpleNamespace(session_hash="sweeping page")
    replayed, replay = [], sweep.replay

    def replay_then_press_stop_at_two(*args, **kwargs):
        replayed.append(kwargs["gamma"])
        if kwargs["gamma"] == 2:
            handlers.stop_race(page)
        return replay(*args, **kwargs)

    monkeypatch.setattr(sweep, "replay", replay_then_press_stop_at_two)
    race = handlers.run_race(str(uploads / "0.png"), QUESTIONS[0], PRESET, "text-only", max_new_tokens=24, page=page)
    updates = list(race)
    shutil.rmtree(uploads)
    assert replayed == [1, 2]  # the sweep went no further than the draft length at hand
    # Stop stayed on until the stopped page came back (Run on, Stop off, in its last updates)
    first_stopped = next(i for i, update in enumerate(updates) if "Stopped." in str(update.get("outcome")))
    assert not any("stop" in update and not update["stop"].interactive for update in updates[:first_stopped])
    last = updates[-1]
    assert "Stopped." in last["outcome"] and last["run"].interactive and not last["stop"].interactive
    assert "· done" in last["spd_panel"] and "· done" in last["ar_panel"]  # the race itself had ended


def test_the_stop_button_ends_the_table_of_strategies_between_its_strategies(app, world, monkeypatch):
    """After the γ sweep the race's call replays the answer with every strategy of the preset; Stop is
    answered between two strategies, not after all of them, and the table says it was not made."""
    uploads = Path(gradio.utils.get_upload_folder()) / f"table-stop-{uuid.uuid4().hex}"
    uploads.mkdir(parents=True)
    shutil.copy(world / "images" / "0.png", uploads / "0.png")
    page = SimpleNamespace(session_hash="comparing page")
    replayed, replay = [], sweep.replay
    offered = presets.PRESETS[PRESET].drafter_names()

    def replay_then_press_stop_at_the_second_strategy(drafter, *args, **kwargs):
        replayed.append(drafter.name)
        if len(replayed) == len(sweep.GAMMAS) + 2:  # the γ sweep's ten, then the table's second replay
            handlers.stop_race(page)
        return replay(drafter, *args, **kwargs)

    monkeypatch.setattr(sweep, "replay", replay_then_press_stop_at_the_second_strategy)
    race = handlers.run_race(str(uploads / "0.png"), QUESTIONS[0], PRESET, "text-only", max_new_tokens=24, page=page)
    updates = list(race)
    shutil.rmtree(uploads)
    # the table reuses the sweep's replay of the race's own drafter, then replays the others in turn:
    # none past the one at hand
    assert replayed[len(sweep.GAMMAS) :] == [name for name in offered if name != "text-only"][:2]
    last = updates[-1]
    assert "Stopped." in last["outcome"] and last["run"].interactive and not last["stop"].interactive
    assert last["strategies"] == strategy_table.STOPPED and "· done" in last["spd_panel"]


def test_a_budget_that_runs_out_in_the_sweep_keeps_the_finished_race_and_says_the_sweep_was_cut(
    app, world, monkeypatch
):
    uploads = Path(gradio.utils.get_upload_folder()) / f"sweep-budget-{uuid.uuid4().hex}"
    uploads.mkdir(parents=True)
    shutil.copy(world / "images" / "0.png", uploads / "0.png")
    page = SimpleNamespace(session_hash="page whose budget runs out in the sweep")
    replay = sweep.replay

    def replay_then_run_out_at_two(*args, **kwargs):
        if kwargs["gamma"] == 2:  # the race's own limit runs out now, while the sweep replays γ 2
            runs._PAGE_RUNS[(page.session_hash, "race")].running.deadline.arm(0.0)
        return replay(*args, **kwargs)

    monkeypatch.setattr(sweep, "replay", replay_then_run_out_at_two)
    race = handlers.run_race(str(uploads / "0.png"), QUESTIONS[0], PRESET, "text-only", max_new_tokens=24, page=page)
    last = list(race)[-1]
    shutil.rmtree(uploads)
    assert "lossless ✓" in last["outcome"] and "over budget" not in last["outcome"]  # the race stands, whole
    assert "· done" in last["spd_panel"] and "· done" in last["ar_panel"]
    assert "were cut" in last["sweep_note"] and "were cut" in last["strategies"]
    assert last["run"].interactive and not last["stop"].interactive and last["json_file"].interactive


def test_a_budget_that_runs_out_in_the_sweep_leaves_the_trace_whole_and_says_only_the_sweep_was_cut(
    app, world, monkeypatch
):
    uploads = Path(gradio.utils.get_upload_folder()) / f"trace-budget-{uuid.uuid4().hex}"
    uploads.mkdir(parents=True)
    shutil.copy(world / "images" / "0.png", uploads / "0.png")
    deadlines, replay = [], sweep.replay

    class Kept(budget.Deadline):  # the trace's own limit, kept to run it out
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            deadlines.append(self)

    def replay_then_run_out_at_two(*args, **kwargs):
        if kwargs["gamma"] == 2:  # the trace's own limit runs out now, while the sweep replays γ 2
            deadlines[-1].arm(0.0)
        return replay(*args, **kwargs)

    monkeypatch.setattr(budget, "Deadline", Kept)
    monkeypatch.setattr(sweep, "replay", replay_then_run_out_at_two)
    *_, payload = handlers.trace(str(uploads / "0.png"), QUESTIONS[0], PRESET, "text-only", 4, True, 0.8, 0.95, 0, 24)
    shutil.rmtree(uploads)
    assert payload["sweep_cut"] == budget.SWEEP_CUT and "stopped" not in payload  # the race stands, whole
    assert all(run["trace"]["summary"] for run in payload["runs"].values())
    assert payload["comparison"]["identical"] and payload["gamma_sweep"] == [] and payload["strategies"] == []


def test_a_client_disconnecting_stops_decoding(app, world, probe):
    image = uploaded(app, world / "images" / "0.png")
    fn_index = next(i for i, fn in app.fns.items() if fn.api_name == "trace")
    session = uuid.uuid4().hex
    url = app.local_url.rstrip("/") + "/gradio_api/queue"
    data = [image, *args(world, max_new=400)[1:]]
    with httpx.Client(timeout=30) as http:
        http.post(f"{url}/join", json={"data": data, "fn_index": fn_index, "session_hash": session})
        with http.stream("GET", f"{url}/data?session_hash={session}") as stream:
            for _ in stream.iter_lines():
                if len(probe.events) > 50:
                    break
        gone = time.perf_counter()  # the stream is closed: the client is gone
    wait_for(lambda: probe.done)
    print(f"\nclient gone -> runs closed {(probe.closed[0] - gone) * 1000:.0f} ms")
    assert probe.closed[0] - gone <= 0.5 and max(probe.events) <= probe.closed[0]
    assert all(ref() is None for ref in probe.caches)


# --- faults -----------------------------------------------------------------------------------


def damage(folder: Path, how: str) -> None:
    if how == "truncated weights":
        weights = folder / "target" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    elif how == "invalid config":
        (folder / "target" / "config.json").write_text("{ this is not json")
    elif how == "missing weights":
        (folder / "target" / "model.safetensors").unlink()
    elif how == "broken drafter":
        (folder / "drafter-text" / "model.safetensors").write_bytes(b"\0" * 64)


@pytest.mark.parametrize(
    "how, message",
    [
        ("truncated weights", "The models of preset 'broken' could not be loaded ("),
        ("invalid config", "The models of preset 'broken' could not be loaded ("),
        ("missing weights", "Model files missing: "),
        ("broken drafter", "The models of preset 'broken' could not be loaded ("),
    ],
)
def test_a_preset_that_cannot_load_gets_a_message_and_the_others_keep_working(client, world, tmp_path, how, message):
    shutil.copytree(world / "preset", tmp_path / "broken")
    damage(tmp_path / "broken", how)
    spec = loader.PRESETS[PRESET]
    loader.PRESETS["broken"] = loader.Preset(
        "broken",
        str(tmp_path / "broken" / "target"),
        tuple(
            loader.DrafterSpec(d.name, d.kind, d.path.replace(str(world / "preset"), str(tmp_path / "broken")))
            for d in spec.drafters
        ),
    )
    try:
        text = refusal(client, *args(world, preset="broken"))
    finally:
        del loader.PRESETS["broken"]
        loader._LOADED.pop("broken", None)
    assert text.startswith(message)
    if message.startswith("The models"):
        assert text.endswith("Its files may be missing or damaged; the other presets still work.")
    assert token_ids(client.predict(*args(world), api_name="/trace"))  # the preset beside it still works


def test_an_unreachable_hub_preset_gets_a_message(client, world, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loader.PRESETS["hub"] = loader.Preset("hub", "nobody/nothing-here", (loader.DrafterSpec("d", "text-only", "x/y"),))
    try:
        text = refusal(client, *args(world, preset="hub", drafter="d"))
    finally:
        del loader.PRESETS["hub"]
    assert "nobody/nothing-here" in text and "Traceback" not in text
    assert token_ids(client.predict(*args(world), api_name="/trace"))


def test_out_of_memory_while_decoding_is_caught_and_its_memory_freed(client, world, probe, monkeypatch):
    client.predict(*args(world), api_name="/trace")  # loaded before the fault
    forward, calls, emptied = speculative.Target.forward, [], []

    def failing(self, ids, cache, features=False):
        calls.append(1)
        if len(calls) == 5:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(self, ids, cache, features)

    monkeypatch.setattr(speculative.Target, "forward", failing)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    probe.caches.clear()
    text = refusal(client, *args(world, max_new=64))
    assert text == (
        "The models ran out of memory for this request; it was stopped and its memory freed. "
        "Ask for fewer new tokens, shorten the question, or pick a smaller preset."
    )
    assert len(probe.caches) == 3 and all(ref() is None for ref in probe.caches)
    assert emptied  # the accelerator's cache was emptied
    monkeypatch.undo()
    assert token_ids(client.predict(*args(world), api_name="/trace"))


# --- security ---------------------------------------------------------------------------------


def test_no_model_is_ever_loaded_with_remote_code():
    sources = [ROOT / "app.py", *sorted((ROOT / "demo").rglob("*.py"))]
    settings = [
        line.split("trust_remote_code=")[1][:5]
        for p in sources
        for line in p.read_text().splitlines()
        if "trust_remote_code=" in line
    ]
    assert settings and all(s.startswith("False") for s in settings)


def test_models_come_only_from_the_presets_even_with_downloads_allowed(client, app, world, monkeypatch):
    monkeypatch.setenv("DEMO_ALLOW_DOWNLOADS", "1")
    for name in ("HuggingFaceTB/SmolVLM-256M-Instruct", str(world / "preset" / "target"), "../assets"):
        text = refusal(client, *args(world, preset=name))
        assert text.startswith(f"Unknown model preset: {name[:20]!r}"[:-1]) and text.endswith(f", {PRESET}.")
    dropdowns = [c for c in app.config["components"] if c["props"].get("elem_id") in ("preset", "drafter")]
    assert len(dropdowns) == 2 and not any(c["props"]["allow_custom_value"] for c in dropdowns)


def test_the_server_listens_on_localhost_without_a_share_link_by_default(app):
    assert app.server_name == "127.0.0.1" and app.local_url.startswith("http://127.0.0.1:")
    assert app.share is False and app.share_url is None
    assert app.max_file_size == validate.MAX_FILE_BYTES and app.show_error is False
    assert app._queue.max_size == server.QUEUE_SIZE


def test_unexpected_errors_go_to_the_log_and_the_caller_gets_a_reference(client, world, monkeypatch, caplog):
    def broken(*_, **__):
        raise RuntimeError("secret internal detail at /srv/app/internal.py")

    monkeypatch.setattr(lane_runs, "lanes", broken)
    text = refusal(client, *args(world))
    assert text.startswith("Something went wrong on the server (reference ")
    assert "secret" not in text and "Traceback" not in text
    reference = text.split("reference ")[1][:8]
    logged = [r for r in caplog.records if reference in r.getMessage()]
    assert logged and logged[0].exc_info and "secret internal detail" in str(logged[0].exc_info[1])
