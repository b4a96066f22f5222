"""Seeded property-based fuzzing of the two API endpoints with malformed calls (hypothesis).

A call starts valid and has up to four of its values replaced by junk: wrong types, None, NaN,
infinities, huge numbers, long or empty text, unknown names, damaged or oversized image files,
paths on the server. Every call must end, within CALL_LIMIT_S, either with a result or with one
of the app's own messages (a gr.Error; never the "Something went wrong" of an unexpected error,
never a traceback), and after all of them the process must hold no more open files or threads
than before, within a small tolerance.

    in process  at least 500 calls to the handlers the endpoints run (`trace`, `run_race`)
    over HTTP   60 calls to /trace through gradio_client (JSON values only: it cannot send NaN)

Runs on the tiny random-weight preset; valid calls decode at most 6 tokens.
"""

import gc
import math
import os
import shutil
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as CallTimeout
from pathlib import Path

import gradio as gr
import gradio.utils
import pytest
import tiny
import torch
from gradio_client import handle_file
from gradio_client.exceptions import AppError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_validate import png_bytes

from demo.lab.bench import soak
from demo.models import loader
from demo.page import handlers, server

PRESET = "tiny-fuzz"
CALL_LIMIT_S = 30.0  # a call that takes longer has hung
UNEXPECTED = ("Something went wrong", "Traceback", "upstream Gradio app has raised an exception")
PARAMS = (
    "image",
    "question",
    "preset",
    "drafter",
    "gamma",
    "greedy",
    "temperature",
    "top_p",
    "seed",
    "max_new",
    "min_confidence",
    "second_drafter",
)


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def resources() -> tuple[int, int]:
    gc.collect()
    time.sleep(0.2)  # loading threads finish
    return open_files(), threading.active_count()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Image files inside Gradio's upload folder (where a request may read them), good and bad."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    tiny.save_preset(tmp_path_factory.mktemp("fuzz"), PRESET)
    folder = Path(gradio.utils.get_upload_folder()) / f"fuzz-{uuid.uuid4().hex}"
    folder.mkdir(parents=True)
    tiny.images(1)[0].save(folder / "good.png")
    tiny.images(2)[1].convert("RGBA").save(folder / "rgba.png")
    (folder / "text.png").write_bytes(b"not an image\n")
    (folder / "huge.png").write_bytes(png_bytes(20_000, 20_000))
    (folder / "cut.png").write_bytes((folder / "good.png").read_bytes()[:200])
    (folder / "empty.png").write_bytes(b"")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
    loader.PRESETS.pop(PRESET, None)
    torch.set_num_threads(threads)


JSON_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["path", "url", "a"]), st.text(max_size=12), max_size=2),
)
JUNK = st.one_of(JSON_JUNK, st.sampled_from([math.nan, math.inf, -math.inf]))


def junk_for(name: str, folder: Path, json_only: bool) -> st.SearchStrategy:
    """Bad values for one parameter: generic junk, plus near misses of its own kind."""
    generic = JSON_JUNK if json_only else JUNK
    near = {
        "image": st.sampled_from(
            [None, "/etc/passwd", {"path": "/etc/passwd"}, str(folder / ".." / "x.png"), "http://127.0.0.1/a.png"]
            + [str(folder / f) for f in ("text.png", "huge.png", "cut.png", "empty.png", "missing.png")]
        ),
        "question": st.sampled_from(["", "   \n\t", "x" * 4001, "word " * 700, "\x00" * 5]),
        "preset": st.sampled_from(["embedded", "llava-1.5-7b", "nope", "../assets", "org/model", ""]),
        "drafter": st.sampled_from(["nope", "", "text_only"]),
        "gamma": st.integers(-5, 30),
        "greedy": st.sampled_from([0, 1, "true"]),
        "temperature": st.floats(-2, 10, allow_nan=False),
        "top_p": st.floats(-1, 2, allow_nan=False),
        "seed": st.sampled_from([-1, 2**32, 2**64, 1.5]),
        "max_new": st.integers(-10, 2000),
        "min_confidence": st.floats(-1, 2, allow_nan=False),
        # (no "+tree" name here: offered, but a tree decodes only once the tree drafter has landed)
        "second_drafter": st.sampled_from(["", "nope", "layer-skip", ["image-aware", "text-only"], ["x"]]),
    }[name]
    return st.one_of(near, generic)


def valid_values(folder: Path) -> dict:
    return {
        "image": st.sampled_from([str(folder / "good.png"), str(folder / "rgba.png")]),
        "question": st.sampled_from(tiny.QUESTIONS),
        "preset": st.just(PRESET),
        "drafter": st.sampled_from(["text-only", "image-aware"]),
        "gamma": st.integers(1, 10),
        "greedy": st.booleans(),
        "temperature": st.floats(0.05, 5),
        "top_p": st.floats(0.01, 1),
        "seed": st.integers(0, 2**32 - 1),
        "max_new": st.integers(1, 6),
        "min_confidence": st.sampled_from([0.0, 0.3, 0.9]),
        "second_drafter": st.sampled_from(["none", "none", "image-aware"]),
    }


def calls(folder: Path, json_only: bool = False) -> st.SearchStrategy:
    """A valid call with up to four values replaced by junk; the names of the replaced values."""

    @st.composite
    def call(draw):
        values = {name: draw(strategy) for name, strategy in valid_values(folder).items()}
        broken = draw(st.sets(st.sampled_from(PARAMS), max_size=4))
        for name in sorted(broken):
            values[name] = draw(junk_for(name, folder, json_only))
        return values, broken

    return call()


def page_arguments(values: dict) -> tuple:
    """The same call as the page's /race endpoint takes it: /trace's, then its Adaptive box, ticked."""
    return (*[values[name] for name in PARAMS], True)


def good(folder: Path) -> dict:
    """One valid call, to warm the models and the server up before resources are counted."""
    values = (str(folder / "good.png"), tiny.QUESTIONS[0], PRESET, "text-only", 4, True, 0.8, 0.95, 0, 4, 0.0, "none")
    return dict(zip(PARAMS, values, strict=True))


def consume(handler, arguments) -> str:
    """Run a handler to the end: "result", or "refused" with one of the app's own messages. A
    /trace result of a greedy race must show identical outputs in every lane."""
    outputs = []
    try:
        outputs.extend(handler(*arguments))
    except gr.Error as error:
        assert error.message and not any(text in error.message for text in UNEXPECTED), error.message
        return "refused"
    if outputs and handler is handlers.trace:  # its last value is the document (the page's are updates)
        payload = outputs[-1]
        lossless = all(c["identical"] for c in payload["comparisons"].values())  # every speculative lane
        assert lossless or not payload["settings"]["sampling"]["greedy"]
    return "result"


def fuzzed(n: int):
    """Hypothesis's settings for n generated calls: the same calls on every run (derandomized, no
    example database), no deadline (a call decodes), and large slow cases allowed."""
    return settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest.mark.slow
def test_500_malformed_calls_to_the_handlers_end_in_a_result_or_a_message(files):
    outcomes = Counter()
    pool = ThreadPoolExecutor(1)
    assert pool.submit(consume, handlers.trace, list(good(files).values())).result() == "result"
    before = resources()

    @fuzzed(500)
    @given(case=calls(files), page=st.booleans())
    def one(case, page):
        values, _ = case
        handler, arguments = (
            (handlers.run_race, page_arguments(values)) if page else (handlers.trace, [values[n] for n in PARAMS])
        )
        try:
            outcome = pool.submit(consume, handler, arguments).result(timeout=CALL_LIMIT_S)
        except CallTimeout:
            pytest.fail(f"a call hung: {values}")
        outcomes[outcome, "page" if page else "api"] += 1

    one()
    pool.shutdown()
    after = resources()
    print(f"\nin process: {dict(outcomes)}; open files {before[0]} -> {after[0]}, threads {before[1]} -> {after[1]}")
    assert sum(outcomes.values()) >= 500
    assert outcomes["result", "api"] >= 20 and outcomes["result", "page"] >= 20  # the fuzz reached the decoder
    assert after[0] <= before[0] + 3 and after[1] <= before[1] + 1


@pytest.mark.slow
def test_60_malformed_calls_over_http_end_in_a_result_or_a_message(files):
    demo = server.build_demo(default_preset=PRESET)
    server.launch(demo, warm=None, prevent_thread_lock=True, quiet=True)
    client = soak.client(demo.local_url)
    outcomes = Counter()

    def send(values: dict):
        image = values["image"]
        if isinstance(image, str) and Path(image).parent == files and Path(image).exists():
            values = {**values, "image": handle_file(image)}  # a file of ours: uploaded, as a client would
        return client.predict(*[values[n] for n in PARAMS], api_name="/trace")

    try:
        assert send(good(files))["comparison"]["identical"]
        before = resources()

        @fuzzed(60)
        @given(case=calls(files, json_only=True))
        def one(case):
            values, _ = case
            try:
                result = send(values)
            except AppError as error:
                assert str(error) and not any(text in str(error) for text in UNEXPECTED), str(error)
                outcomes["refused"] += 1
            else:
                assert result["comparison"]["identical"] or not result["settings"]["sampling"]["greedy"]
                outcomes["result"] += 1

        started = time.perf_counter()
        one()
        after = resources()
    finally:
        demo.close()
    print(
        f"\nover HTTP: {dict(outcomes)} in {time.perf_counter() - started:.1f} s; "
        f"open files {before[0]} -> {after[0]}, threads {before[1]} -> {after[1]}"
    )
    assert sum(outcomes.values()) >= 60 and outcomes["result"] >= 5
    assert after[0] <= before[0] + 3 and after[1] <= before[1] + 2
