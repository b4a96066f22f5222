"""The page throws no JavaScript errors over three races in headless Chromium (issue 54).

Headless Chromium had logged 215 Plotly errors over 8 races ("Cannot read properties of undefined
(reading '_redrawFromAutoMarginCount')", and '_rehover'): the page's own script purged each plot
element Gradio dropped while plotly was still drawing it (`demo.page.charts.JS`). Every uncaught
error and unhandled rejection of the page counts (Playwright's "pageerror").
"""

import pytest
from test_browser import browser, served  # noqa: F401 (fixtures: Chromium, and the app in this process)

from demo.bench.page import DRAWN

pytestmark = pytest.mark.slow  # a server and a browser: seconds each, the full suite only


def test_three_races_raise_no_page_errors(browser, served):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda error: errors.append(f"{error.name}: {error.message}"))
    page.goto(served)
    page.wait_for_selector(DRAWN)
    page.locator("#examples .thumbnail-item").first.click()
    page.wait_for_function("document.querySelector('#question textarea').value.length > 0")
    page.wait_for_selector("#image img")
    for race in range(3):
        page.click("#run")
        page.wait_for_selector("#run[disabled]", timeout=30_000)
        page.wait_for_selector("#run:not([disabled])", timeout=120_000)
        page.wait_for_selector("#outcome .badge", timeout=30_000)
        page.wait_for_timeout(1000)  # the charts' last redraws, and any error they throw
        assert not errors, f"race {race + 1}: {len(errors)} page errors, the first: {errors[0]}"
    page.close()
