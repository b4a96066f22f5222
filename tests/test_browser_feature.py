"""The drafter that reads the target's hidden state, raced in a real browser against the blind
drafter, side by side (issue 55): both lanes write the target's own answer, and `feature`, which
sees the image through the target's eyes, needs fewer rounds for it than the text-only drafter.
One race at desktop width on the first example; the screenshot goes under runs/screenshots/ (or
$SCREENSHOT_DIR) as feature-vs-text-only.png."""

import pytest
from test_browser import EMBEDDED, browser, pick, served, shoot  # noqa: F401 (the fixtures)

from demo.lab.bench.page import DRAWN

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not EMBEDDED, reason="the feature drafter's checkpoint is the embedded world's"),
]


def test_feature_races_text_only_side_by_side_and_needs_fewer_rounds(browser, served):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(served)
    page.wait_for_selector(DRAWN, timeout=120_000)
    page.locator("#examples .thumbnail-item").first.click()
    page.wait_for_function("document.querySelector('#question textarea').value.length > 0")
    assert page.input_value("#drafter input") == "text-only"  # the first lane: the blind drafter, by default
    pick(page, "drafter2", "feature")
    page.wait_for_selector("#spd2-panel", state="visible")
    page.click("#run")
    page.wait_for_selector("#outcome .badge", timeout=300_000)
    page.wait_for_selector("#run:not([disabled])", timeout=300_000)

    assert "Speculative, second lane · feature" in page.inner_text("#spd2-panel .panel-title")
    outcome = page.inner_text("#outcome")
    assert "text-only: lossless ✓" in outcome and "feature: lossless ✓" in outcome
    n = page.locator("#ar-panel .tok").count()  # greedy: both lanes write the target's own tokens
    assert page.locator("#spd-panel .tok").count() == page.locator("#spd2-panel .tok").count() == n > 1
    text = "sel => Array.from(document.querySelectorAll(sel), e => e.firstChild.textContent).join('')"
    assert page.evaluate(text, "#spd2-panel .tok") == page.evaluate(text, "#ar-panel .tok")
    blind, feature = page.locator("#blocks .round").count(), page.locator("#blocks2 .round").count()
    assert 1 <= feature < blind, (feature, blind)  # longer accepted chains: fewer verify forwards
    page.wait_for_timeout(400)  # the last plotly redraw
    legend = page.eval_on_selector_all("#chart-race .legendtext", "texts => texts.map(t => t.textContent)")
    assert legend == ["SPD text-only", "SPD feature", "autoregressive"]
    shoot(page, "feature-vs-text-only.png")
    page.close()
