"""The page a teacher runs a class from, in a real browser at 1400 and 420 px: the first screen
holds the image, the question, the examples and Run; the step mode steps through the last race
one round at a time;
a request that fails clears the last race's panels. One page load per width (browser tests are
slow); screenshots under runs/screenshots/ (or $SCREENSHOT_DIR) as classroom-<width>-*.png."""

import pytest
from test_browser import EMBEDDED, browser, served, shoot  # noqa: F401 (the fixtures)

from demo.lab.bench.page import DRAWN

pytestmark = pytest.mark.slow


def outcome_has(page, text: str, timeout_s: float = 60) -> None:
    page.wait_for_function(f"document.querySelector('#outcome').innerText.includes({text!r})", timeout=timeout_s * 1000)


def set_max_new(page, n: int) -> None:
    page.fill("#max-new input[type=number]", str(n))
    page.press("#max-new input[type=number]", "Enter")


@pytest.mark.parametrize("width, height", [(1400, 900), (420, 860)])
def test_a_class_can_run_step_through_and_stop_a_race_at_this_width(browser, served, width, height):  # noqa: F811
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(served)
    page.wait_for_selector(DRAWN)
    # 1. The first screen holds the image, the question and Run, whole, and the examples' first
    # row (at 1400 px the examples fill the column beside the form and run on below it).
    for element in ("#image", "#examples .thumbnail-item >> nth=0", "#question", "#run"):
        box = page.locator(element).bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= height, (element, box)
    assert page.locator("#examples .thumbnail-item").first.is_visible()
    shoot(page, f"classroom-{width}-first-screen.png")

    # 2. A short race, then the step mode: one verification round at a time, with its annotation.
    page.locator("#examples .thumbnail-item").first.click()
    page.wait_for_selector("#image img")
    set_max_new(page, 24)
    page.click("#run")
    page.wait_for_selector("#outcome .badge", timeout=120_000)
    page.wait_for_selector("#run:not([disabled])", timeout=120_000)
    assert "projected for a 7B LLaVA" in page.inner_text("#outcome")
    assert "measured on this machine: ×" in page.inner_text("#outcome")
    page.click("#next-round")
    outcome_has(page, "Step by step: round 1 of ")
    assert "Round 1 of this race" in page.inner_text("#how-round")
    after_one = page.locator("#spd-panel .tok").count()
    page.click("#next-round")
    outcome_has(page, "Step by step: round 2 of ")
    assert "Round 2 of this race" in page.inner_text("#how-round")
    assert page.locator("#spd-panel .tok").count() > after_one >= 2  # the prefill's token and round 1's
    page.locator("#how-round").scroll_into_view_if_needed()
    shoot(page, f"classroom-{width}-step.png")

    # 3. A request that fails clears the last race's panels instead of leaving them looking current.
    page.fill("#question textarea", "")
    page.click("#run")
    outcome_has(page, "Ask a question about the image first.")
    assert page.locator("#spd-panel .tok").count() == 0 and page.locator("#ar-panel .tok").count() == 0
    assert "Run the race and one of its rounds is explained here" in page.inner_text("#how-round")
    shoot(page, f"classroom-{width}-error.png")

    page.close()
