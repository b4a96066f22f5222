"""The browser tests' Chromium and app, one of each per test worker (session-scoped), shared by
every tests/test_browser*.py file instead of started again in each: a server's warm-up and a
browser's launch cost seconds, and each file started both. conftest imports these fixtures, so
this module imports nothing heavy at load; the fixtures import what they need when first asked.
Each test opens its own page, so the tests share no page state: only the server, whose races
queue one at a time as on the Space."""

from pathlib import Path

import pytest


def embedded() -> bool:
    """Whether assets/world holds the embedded models and their gallery (else the tiny random ones)."""
    from demo.models import loader
    from demo.page import layout

    return bool(Path(loader.PRESETS[loader.DEFAULT_PRESET].target).exists() and layout.load_examples())


@pytest.fixture(scope="session")
def chromium():
    """Debian's headless Chromium, driven by Playwright."""
    from playwright.sync_api import sync_playwright

    from demo.lab.bench import page as page_bench

    with sync_playwright() as playwright:
        browser = page_bench.launch_chromium(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    """The app in this process, its preset warmed up first (as launch() does in the background)."""
    import tiny
    from test_app import write_examples

    from demo import session
    from demo.models import loader
    from demo.page import server

    if embedded():
        preset, examples = loader.DEFAULT_PRESET, loader.ASSETS / "examples"
    else:
        root = tmp_path_factory.mktemp("tiny-world")
        preset, examples = tiny.save_preset(root).name, root / "examples"
        write_examples(examples)
    session.warm_up(preset)
    demo = server.build_demo(default_preset=preset, examples_dir=examples)
    server.launch(demo, warm=None, prevent_thread_lock=True, quiet=True)
    yield demo.local_url
    settle(demo)
    demo.close()


def settle(demo, timeout_s: float = 120.0) -> None:
    """Wait until the app runs and holds no queued event. A test may end while work it started goes
    on (a race's image ablation, which follows the race the test read), and a process that exits
    while a worker thread is inside a torch forward aborts ("terminate called without an active
    exception", rc 134: one test file run alone, one run in three)."""
    import time

    queue, deadline = demo._queue, time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = any(job is not None for job in queue.active_jobs)
        if not running and not any(q.queue for q in queue.event_queue_per_concurrency_id.values()):
            return
        time.sleep(0.1)
