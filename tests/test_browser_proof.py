"""The proof section in a real browser (issue 56), at a desktop and a phone width: after a race,
the time split chart and its sentence, the answer's image-dependent tokens marked; then Check
exactness, whose panels show the lane and the target alone passing and the broken rule failing.
Screenshots go where tests/test_browser.py puts its own (proof-1400.png, proof-420.png)."""

import re

import pytest
from test_browser import EMBEDDED, browser, served, shoot  # noqa: F401 (fixtures)

from demo.lab.bench.page import DRAWN

pytestmark = pytest.mark.slow

# A caption question about any of the world's images: the text-only drafter cannot see where the
# shape is, so accepting its drafts writes other words than the target's (measured on all ten
# gallery images at the page's temperature 0.8: the broken rule's p-value 1/4001, the lane's 1.0).
CAPTION = "Write a short caption for this image."
DRAWING = r"\d+ of \d+ draws a way, about \d+ s left"  # the law check's progress


# Words for developers, never for the page's visitors: a file path, a module, a command line, a setting.
DEVELOPER = re.compile(r"python -m|DEMO_|\b[\w./-]+\.(?:md|py|json)\b|\bdemo\.[a-z_]+|shared/|docs/|Hugging Face cache")


def developer_words(page) -> list[str]:
    """The developer's words in the page's rendered text, its closed sections included."""
    text = page.evaluate("() => document.body.textContent")
    return sorted({m.group(0) for m in DEVELOPER.finditer(text)})


@pytest.mark.skipif(not EMBEDDED, reason="the law check's example is the embedded world's")
def test_the_time_split_the_image_dependent_tokens_and_the_law_check_show_after_a_race(browser, served):  # noqa: F811
    """One race and one check, read at 1400 px and again at 420 px (a phone)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(served)
    page.wait_for_selector(DRAWN)
    assert developer_words(page) == []  # before a run
    page.locator("#examples .thumbnail-item").first.click()
    page.wait_for_function("document.querySelector('#question textarea').value.length > 0")
    page.fill("#question textarea", CAPTION)
    page.click("#run")
    page.wait_for_selector("#outcome .badge", timeout=120_000)
    page.wait_for_selector("#run:not([disabled])", timeout=300_000)  # the γ sweep and the table come after the badge
    page.wait_for_selector("#time-note .time-sentence", timeout=60_000)
    page.wait_for_selector("#image-dependence .img-dep", timeout=60_000)
    assert developer_words(page) == []  # after it: the headline, its closed section, the proof panels
    page.fill("#question textarea", "Is there a circle?")  # the check is of the race shown, not of the form
    page.set_viewport_size({"width": 420, "height": 1000})  # its progress read on a phone
    page.click("#check-exactness")
    # its progress, on its chart alone: the draws done and the time left, not Gradio's timer against an estimate
    page.wait_for_function(f"/{DRAWING}/.test(document.querySelector('#law-chart').innerText)", timeout=120_000)
    proof_text = page.inner_text("#proof")
    assert "draws a way" not in page.inner_text("#law-note") and not re.search(r"\d\.\d/\d+\.\ds", proof_text)
    page.wait_for_selector("#law-note .law-fail", timeout=120_000)
    assert page.locator("#law-note .law-fail").count() == 1
    for width in (1400, 420):
        page.set_viewport_size({"width": width, "height": 1000})
        page.wait_for_timeout(500)  # plotly redraws at the new width
        sentence = page.inner_text("#time-note")
        assert "single steps" in sentence and "ate the most" in sentence and "τ" in sentence
        assert page.locator("#time-split-chart .js-plotly-plot .main-svg").count() >= 1
        assert page.locator("#time-split-chart .barlayer .trace").count() >= 3  # drafting, verification, the rest
        assert page.locator("#time-split-chart").bounding_box()["width"] <= width
        assert "needed the image" in page.inner_text("#image-dependence")
        assert page.locator("#image-dependence .img-dep").first.is_visible()
        assert page.locator("#law-note .law-pass").count() == 2  # the lane and the target alone
        assert "broken rule" in page.inner_text("#law-note .law-fail")
        assert page.locator("#law-chart .js-plotly-plot .main-svg").count() >= 1
        assert page.locator("#law-chart").bounding_box()["width"] <= width
        page.locator("#law-chart").scroll_into_view_if_needed()
        shoot(page, f"proof-{width}.png")
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.click("#paradox")  # the classroom example of high acceptance with little speedup, loaded
    page.wait_for_function("document.querySelector('#question textarea').value.includes('Describe')")
    assert "layer-skip" in page.locator("#drafter input").input_value()
    assert "High acceptance, little speedup" in page.inner_text("#proof")
    page.close()
