"""One door: every route of the running server that joins a queue or runs an endpoint passes the
guard's checks; /call/v2 answers 4xx with a sentence; forwarded headers are not read off a Space;
gradio_client hears the share's sentence; a copied session hash uses up nobody's share; a newcomer
finds a waiting place and an upload place however many addresses came first.

The app runs in this process on the tiny preset of `test_reliability`, over plain HTTP from
loopback addresses (127.0.0.x) and through gradio_client.
"""

import os
import re
import threading
import time
import uuid
from pathlib import Path

import gradio.route_utils
import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from starlette.routing import Mount
from test_reliability import args, serve
from test_visitors import BUDGET, SHARE, Join, guard_of, heavy, heavy_args, http, upload, world  # noqa: F401

from demo.serve import guard, upload_folder, visitors


@pytest.fixture(scope="module")
def app(world):  # noqa: F811
    demo = serve()
    yield demo
    demo.close()


def routes(demo) -> list[tuple[str, str]]:
    """(method, path) of every route the running server's app serves: mounts and included routers
    (FastAPI's, each with its prefix applied) walked."""
    found = []

    def walk(table, prefix: str) -> None:
        for route in table:
            if isinstance(route, Mount):
                walk(route.routes, prefix + route.path)
            elif hasattr(route, "effective_candidates"):  # an included router
                walk(route.effective_candidates(), prefix)
            for method in sorted(getattr(route, "methods", None) or ()):
                found.append((method, prefix + route.path))

    walk(demo.app.routes, "")
    return found


def trace_values(world, image) -> list:  # noqa: F811
    return [image, *args(world)[1:]]


def test_every_route_that_joins_a_queue_or_runs_an_endpoint_passes_the_guard(app, world, monkeypatch):  # noqa: F811
    reached = []  # (path, guarded) of every request that reached a queue join or an endpoint's run
    queue, run = app._queue, gradio.route_utils.call_process_api
    push = queue.push

    async def pushed(body, request, username):
        reached.append((request.url.path, request.scope.get(guard.GUARDED, False)))
        return await push(body, request, username)

    async def ran(*a, **k):
        request = k["body"].request
        if request is not None:
            reached.append((request.url.path, request.scope.get(guard.GUARDED, False)))
        return await run(*a, **k)

    monkeypatch.setattr(queue, "push", pushed)
    monkeypatch.setattr(gradio.route_utils, "call_process_api", ran)
    image = upload(http(), app, world / "images" / "0.png")
    values = trace_values(world, image)
    trace = next(i for i, fn in app.fns.items() if fn.api_name == "trace")
    names = [p["parameter_name"] for p in app.get_api_info()["named_endpoints"]["/trace"]["parameters"]]
    table = routes(app)
    assert ("POST", "/gradio_api/call/v2/{api_name}") in table and ("POST", "/gradio_api/queue/join") in table
    statuses = {}
    for n, (method, path) in enumerate(table):
        url = app.local_url.rstrip("/") + re.sub(
            r"\{(\w+)(:\w+)?\}", lambda m: {"api_name": "trace"}.get(m[1], "x"), path
        )
        with http(f"127.0.3.{n % 250 + 1}") as client:  # an address of its own: every share is whole
            bodies = [{"data": values, "fn_index": trace, "session_hash": uuid.uuid4().hex}, dict(zip(names, values))]
            for body in bodies if method == "POST" else [None]:
                try:
                    response = client.request(method, url, json=body, timeout=3)
                    statuses[(method, path, bool(body and "data" in body))] = response.status_code
                except httpx.HTTPError:  # a stream that waits for events, or ends unfinished: nothing ran
                    pass
    bare = [path for path, guarded in reached if not guarded]
    assert not bare, f"these reached a handler without the guard: {sorted(set(bare))}"
    joined = {path for path, _ in reached}
    assert {"/gradio_api/queue/join", "/gradio_api/call/trace", "/gradio_api/call/v2/trace"} <= joined, joined
    assert [key for key, status in statuses.items() if status >= 500] == []


def test_call_v2_is_refused_beyond_the_share_and_answers_a_bad_call_with_a_4xx_sentence(app, world, heavy):  # noqa: F811
    client = http("127.0.4.1")
    image = upload(client, app, world / "images" / "0.png")
    names = [p["parameter_name"] for p in app.get_api_info()["named_endpoints"]["/race"]["parameters"]]
    base = app.local_url.rstrip("/") + "/gradio_api/call/v2/"
    body = dict(zip(names, heavy_args(image)))
    answers = [None] * 8

    def join(i: int) -> None:
        answers[i] = client.post(base + "race", json=body)

    threads = [threading.Thread(target=join, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200, 200, *[429] * 6], statuses
    assert all(SHARE in a.json()["detail"] for a in answers if a.status_code == 429)
    params = app.get_api_info()["named_endpoints"]["/trace"]["parameters"]
    values = dict(zip([p["parameter_name"] for p in params], trace_values(world, image)))
    no_image = client.post(base + "trace", json={k: v for k, v in values.items() if k != "image"})
    assert no_image.status_code == 422 and no_image.json()["detail"].startswith("/trace: No value provided"), (
        no_image.text
    )
    unknown = client.post(base + "nothing", json={})
    assert unknown.status_code == 404 and unknown.json()["detail"].startswith("There is no endpoint /nothing;")
    stranger = client.post(base + "trace", json={"colour": "red"})
    assert stranger.status_code == 422 and "`colour` is not a valid key-word argument" in stranger.json()["detail"]


def test_forged_forwarded_headers_from_loopback_are_one_visitor_off_a_space(app, world, heavy):  # noqa: F811
    image = upload(http("127.0.4.2"), app, world / "images" / "0.png")
    joins = [
        Join(
            http("127.0.4.2", headers={"X-Forwarded-For": f"10.9.8.{i}", "Forwarded": f"for=10.9.8.{i}"}),
            app,
            "race",
            heavy_args(image),
        )
        for i in range(4)
    ]
    assert [j.status for j in joins] == [200, 200, 429, 429], [j.detail for j in joins]
    for join in joins[:2]:
        join.wait()


def test_gradio_client_hears_the_share_sentence_and_a_copied_session_hash_uses_up_no_share(app, world, heavy):  # noqa: F811
    victim = Client(app.local_url, verbose=False)
    holder = http("127.0.0.1")
    image = upload(holder, app, world / "images" / "0.png")
    held = [Join(holder, app, "race", heavy_args(image)) for _ in range(2)]
    assert [j.status for j in held] == [200, 200]
    with pytest.raises(AppError) as refused:
        victim.predict(*args(world), api_name="/trace")
    assert SHARE in str(refused.value), refused.value
    for join in held:
        join.wait()
    page = uuid.uuid4().hex  # a visitor's page, its session hash copied by another address
    copied = [Join(http("127.0.4.3"), app, "race", heavy_args(image), session=page) for _ in range(2)]
    assert [j.status for j in copied] == [200, 200]
    own = Join(http("127.0.4.4"), app, "trace", trace_values(world, image), session=page)
    assert own.status == 200, own.detail
    for join in (*copied, own):
        join.wait()
    victim.close()


@pytest.fixture
def capped(world, tmp_path, monkeypatch):  # noqa: F811
    """The app on its own cache folder, capped at 3 MiB."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(guard.UPLOAD_FOLDER_ENV, "3")
    demo = serve()
    yield demo
    demo.close()


def test_sixty_addresses_of_unraced_images_leave_room_for_a_newcomer_and_an_evicted_image_races_once_sent_again(
    capped,
    world,  # noqa: F811
):
    url = capped.local_url.rstrip("/") + "/gradio_api/upload"
    first = http("127.0.5.1")
    image = upload(first, capped, world / "images" / "0.png")  # the oldest reserved image of them all
    answers = [
        http(f"127.0.5.{i // 2 + 2}").post(url, files={"files": (f"{i}.bin", os.urandom(30 * 1024))})
        for i in range(119)  # 60 addresses, two images each, never raced: 3.5 MiB against the 3 MiB cap
    ]
    assert {a.status_code for a in answers} == {200}
    newcomer = http("127.0.6.1").post(url, files={"files": ("new.bin", os.urandom(30 * 1024))})
    assert newcomer.status_code == 200, newcomer.text
    assert not Path(image["path"]).exists()
    evicted = Join(first, capped, "trace", trace_values(world, image))
    assert evicted.status == 410 and evicted.detail == upload_folder.EVICTED
    again = upload(first, capped, world / "images" / "0.png")
    assert again["path"] == image["path"]  # the same bytes: the same path, no longer evicted
    raced = Join(first, capped, "trace", trace_values(world, again))
    assert raced.status == 200, raced.detail
    raced.wait()
    assert raced.result["success"], raced.seen


@pytest.fixture
def small_queue(world, heavy):  # noqa: F811
    demo = serve(queue_size=4)
    yield demo
    demo.close()


def test_a_newcomer_to_a_full_queue_takes_the_place_of_a_visitors_second_waiting_request(small_queue, world):  # noqa: F811
    image = upload(http("127.0.7.1"), small_queue, world / "images" / "0.png")
    running = Join(http("127.0.7.1"), small_queue, "race", heavy_args(image))
    while running.started is None and running.thread.is_alive():
        time.sleep(0.05)
    waiting = [Join(http(f"127.0.7.{v}"), small_queue, "race", heavy_args(image)) for v in (1, 2, 2, 3)]
    assert [j.status for j in waiting] == [200] * 4  # the queue's 4 places: 7.2 holds two
    full = Join(http("127.0.7.3"), small_queue, "race", heavy_args(image))
    assert full.status == 503  # 7.3 has a place already
    newcomer = Join(http("127.0.7.4"), small_queue, "race", heavy_args(image))
    assert newcomer.status == 200, newcomer.detail
    waiting[2].wait(30)
    assert waiting[2].result == {**waiting[2].result, "success": False, "output": {"error": visitors.GAVE_WAY}}
    nobody_holds_two = Join(http("127.0.7.5"), small_queue, "race", heavy_args(image))
    assert nobody_holds_two.status == 503


@pytest.mark.parametrize("k", [0, 4, -1, 2.5, "2", None, True, [2], {"k": 2}, 10**9])
def test_exactness_refuses_a_bad_k_with_its_sentence(app, world, k):  # noqa: F811
    client = Client(app.local_url, verbose=False)
    with pytest.raises(AppError) as refused:  # /exactness takes /trace's values, then k
        client.predict(*args(world), k=k, api_name="/exactness")
    client.close()
    expected = f"k (the tokens after the first that are checked) must be a whole number from 1 to 3; got {k!r}."
    assert str(refused.value) == expected


def test_answered_sessions_leave_nothing_behind_in_gradios_queue(app, world):  # noqa: F811
    client, sessions = Client(app.local_url, verbose=False), []
    for _ in range(6):  # a new session each, as a fresh gradio_client or a new page has
        client.reset_session()
        sessions.append(client.session_hash)
        client.predict(*args(world), api_name="/trace")
    client.close()
    queue = app._queue  # Gradio kept every session's message queue (2,000) and empty set of ids
    assert len(set(sessions) & set(queue.pending_event_ids_session)) <= 1, queue.pending_event_ids_session
    assert len(set(sessions) & set(queue.pending_messages_per_session)) <= 1
