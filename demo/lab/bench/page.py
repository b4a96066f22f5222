"""How quick the page is for a person: `python -m demo.lab.bench.page [--runs 3] [--races N]`.

More, with its measurements: docs/modules.md.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from demo import ROOT
from demo.lab.bench.child_server import free_port

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TARGET_S = 10.0
FIRST_TOKEN_TARGET_S = 1.0
DRAWN = "#chart-pos .main-svg"  # the last chart of the Race tab: the whole page is drawn


def launch_chromium(playwright):
    """Debian's Chromium, headless, with the flags above; missing, it is an error, never a skip."""
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"Chromium not found at {CHROMIUM}: apt-get install -y chromium (or set $CHROMIUM)")
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)


def open_page(page, give_up_s: float = 60.0) -> tuple[subprocess.Popen, float]:
    """Start `python app.py` and load its page in `page`; returns the process (the caller
    terminates it) and the seconds from its start to a usable page."""
    port = free_port()
    started = time.perf_counter()
    app = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env={**os.environ, "GRADIO_SERVER_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            if app.poll() is not None:
                raise RuntimeError(f"app.py exited with {app.returncode}")
            if time.perf_counter() - started > give_up_s:
                raise TimeoutError(f"no page after {give_up_s:.0f} s")
            try:
                page.goto(f"http://127.0.0.1:{port}/", timeout=2_000)
                break
            except Exception:  # not listening yet
                time.sleep(0.05)
        page.wait_for_selector(DRAWN, timeout=give_up_s * 1000)
        return app, time.perf_counter() - started
    except BaseException:
        app.terminate()
        app.wait()
        raise


def first_token(page, read_s: float = 0.0) -> float:
    """Pick the first example, wait `read_s`, press Run: seconds to the first token on screen.
    Waits for the race to finish before it returns."""
    page.locator("#examples .thumbnail-item").first.click()
    page.wait_for_function("document.querySelector('#question textarea').value.length > 0")
    page.wait_for_selector("#image img")
    time.sleep(read_s)
    started = time.perf_counter()
    page.click("#run")
    page.wait_for_selector("#spd-panel .tok, #ar-panel .tok", timeout=60_000)
    seconds = time.perf_counter() - started
    page.wait_for_selector("#outcome .badge", timeout=120_000)
    return seconds


def run_once(browser, read_s: float) -> tuple[float, float]:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    app, start_s = open_page(page)
    try:
        return start_s, first_token(page, read_s)
    finally:
        app.terminate()
        app.wait()
        page.close()


def tab_memory(browser, races: int) -> list[float]:
    """One tab through `races` races of the examples in turn: its JS heap in MiB after each, collected."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    app, _ = open_page(page)
    heaps = []
    try:
        examples = page.locator("#examples .thumbnail-item")
        for i in range(races):
            examples.nth(i % examples.count()).click()
            page.wait_for_function("document.querySelector('#question textarea').value.length > 0")
            page.click("#run")
            page.wait_for_selector("#run[disabled]", timeout=30_000)  # it runs
            page.wait_for_selector("#run:not([disabled])", timeout=180_000)  # the race, its sweep and table done
            page.wait_for_selector("#outcome .badge", timeout=30_000)
            page.wait_for_timeout(600)  # the last plotly redraw
            cdp.send("HeapProfiler.collectGarbage")
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            heaps.append(metrics["JSHeapUsedSize"] / 2**20)
            print(f"race {i + 1}: JS heap {heaps[-1]:.1f} MiB, {metrics['Nodes']:.0f} DOM nodes", flush=True)
    finally:
        app.terminate()
        app.wait()
        page.close()
    return heaps


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh app processes, one after the other")
    parser.add_argument("--read-s", type=float, default=0.0, help="seconds between picking the example and Run")
    parser.add_argument("--races", type=int, default=0, help="then N races in one tab, its JS heap after each")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        results = []
        for i in range(args.runs):
            results.append(run_once(browser, args.read_s))
            print(
                f"run {i + 1}: start to usable page {results[-1][0]:.2f} s, first token {results[-1][1]:.2f} s",
                flush=True,
            )
        heaps = tab_memory(browser, args.races) if args.races else []
        browser.close()
    if heaps:
        print(f"tab JS heap: {heaps[0]:.1f} MiB after the first race, {heaps[-1]:.1f} after race {len(heaps)}")
    for name, k, target in (("start to usable page", 0, START_TARGET_S), ("first token", 1, FIRST_TOKEN_TARGET_S)):
        values = [r[k] for r in results]
        if not values:  # --runs 0: the tab's memory only
            break
        median = statistics.median(values)
        verdict = "meets" if median <= target else "MISSES"
        print(
            f"{name:<22} median {median:.2f} s (min {min(values):.2f}, max {max(values):.2f}) "
            f"{verdict} the target of {target:g} s"
        )


if __name__ == "__main__":
    main()
