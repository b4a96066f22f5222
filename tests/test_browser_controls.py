"""The race's controls in a real browser, as a person uses them, at a desktop and a phone width.

Stop: after a race that was stopped, Run clicked the moment it turns on starts the next race (while
the stopped race's handler still ended, such a click once went nowhere), that race's Stop reads "Stop"
again (a label written over in the browser once stayed "Stopping…" in every later race), and each of its states is readable: the
contrast of its rendered colours (getComputedStyle), WCAG's ratio, is at least 4.5:1. A sampled race
promises no γ sweep (it has none), and the preset's note lists every drafter of the menu with its
one line. Screenshots go where tests/test_browser.py puts its own.
"""

import re
import time

import pytest
import tiny
from test_browser import browser, first_example, served, shoot  # noqa: F401  (fixtures)

from demo.lab.bench.page import DRAWN
from demo.page import drafter_notes, layout, runs

pytestmark = pytest.mark.slow  # a server and a browser

WIDTHS = (1400, 420)
LOOKS = """() => {
  const b = document.querySelector("#stop"); const s = getComputedStyle(b);
  return {label: b.innerText.trim(), disabled: b.disabled, color: s.color, background: s.backgroundColor,
          opacity: s.opacity};
}"""


# Stop's looks the moment it turns on, and its click, in one browser task: with the server's models
# warm, a race may otherwise end between a read from the test and a click from the test (a click
# that then waits for a Stop that never turns on again).
READ_AND_CLICK = (
    f"() => {{ const b = document.querySelector('#stop'); if (b.disabled) return false;"
    f" const looks = ({LOOKS})(); b.click(); return looks; }}"
)


def _channels(css: str) -> tuple[float, ...]:
    """'rgb(1, 2, 3)' or 'rgba(1, 2, 3, 0.5)' as numbers."""
    return tuple(float(x) for x in css[css.index("(") + 1 : css.index(")")].replace("/", ",").split(","))


def luminance(css: str) -> float:
    def linear(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in _channels(css)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(looks: dict) -> float:
    """WCAG's contrast of the label on its button. The button must be opaque (no opacity, an opaque
    fill): otherwise what is seen is blended with the page, and these two colours are not it."""
    assert float(looks["opacity"]) == 1.0, looks
    fill = _channels(looks["background"])
    assert len(fill) == 3 or fill[3] == 1.0, looks
    light, dark = sorted((luminance(looks["color"]), luminance(looks["background"])), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_contrast_is_wcags_ratio():
    assert contrast({"color": "rgb(0, 0, 0)", "background": "rgb(255, 255, 255)", "opacity": "1"}) == pytest.approx(21)
    assert contrast({"color": "rgb(213, 94, 0)", "background": "rgb(239, 68, 68)", "opacity": "1"}) < 1.5


def _looks(page) -> dict:
    looks = page.evaluate(LOOKS)
    assert contrast(looks) >= 4.5, looks
    return looks


TAIL_S = 5.0  # the time the stopped race's handler is made to take after its last update, below


@pytest.fixture
def slow_tail(monkeypatch):
    """The next page run's handler takes TAIL_S more after its last update (the app is in this
    process): what a busy machine does between a run's last update, which turns Run on, and the
    run's end. A click in that gap once went nowhere (the page read "Stopped." and Run was on, yet
    no race came: Gradio drops a click on a button whose event is still running, unless the event
    defers it)."""
    forget, calls = runs.forget_stale_copies, []

    def slow():
        if not calls:
            time.sleep(TAIL_S)
        calls.append(1)
        forget()

    monkeypatch.setattr(runs, "forget_stale_copies", slow)
    return calls


@pytest.mark.parametrize("width", WIDTHS)
def test_stop_reads_stop_after_a_stopped_race_and_is_readable(browser, served, width, tmp_path, slow_tail):  # noqa: F811
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.goto(served)
    page.wait_for_selector(DRAWN)
    idle = _looks(page)
    assert idle["label"] == "Stop" and idle["disabled"]
    # A scene unlike the world's, a long answer allowed: the race lasts long enough to be stopped.
    tiny.images(1)[0].save(tmp_path / "noise.png")
    page.set_input_files("#image input[type=file]", str(tmp_path / "noise.png"))
    page.wait_for_selector("#image img")
    page.fill("#question textarea", "Describe this image in detail.")
    page.fill("#max-new input[type=number]", "400")
    page.press("#max-new input[type=number]", "Enter")
    page.click("#run")
    racing = page.wait_for_function(READ_AND_CLICK, timeout=60_000).json_value()
    assert contrast(racing) >= 4.5, racing
    assert racing["label"] == "Stop" and not racing["disabled"]
    page.wait_for_function("document.querySelector('#stop').disabled", timeout=5_000)
    stopping = _looks(page)  # says so at once, in the browser: "Stop" only once the race has ended
    ended = page.inner_text("#outcome").startswith("Stopped.")
    assert stopping["label"] == "Stopping…" or (ended and stopping["label"] == "Stop"), stopping
    page.wait_for_function("document.querySelector('#outcome').innerText.startsWith('Stopped.')", timeout=60_000)
    page.wait_for_selector("#run:not([disabled])", timeout=30_000)
    stopped = _looks(page)
    assert stopped["label"] == "Stop" and stopped["disabled"]
    assert not slow_tail  # the stopped race's handler has not ended: Run is clicked inside its tail

    # The race after the stopped one, clicked at once: its Stop reads "Stop", and stops it as the first did.
    page.click("#run")
    try:
        again = page.wait_for_function(READ_AND_CLICK, timeout=60_000).json_value()
    except Exception as timed_out:  # what the page showed
        shoot(page, f"stop-after-a-stop-{width}-timed-out.png")
        outcome = page.inner_text("#outcome")[:300]
        raise AssertionError(f"Stop never became clickable; the outcome read: {outcome!r}") from timed_out
    assert contrast(again) >= 4.5, again
    assert again["label"] == "Stop" and not again["disabled"]
    page.wait_for_function("document.querySelector('#outcome').innerText.startsWith('Stopped.')", timeout=60_000)
    page.wait_for_selector("#run:not([disabled])", timeout=30_000)
    assert _looks(page)["label"] == "Stop"
    shoot(page, f"stop-after-a-stop-{width}.png")
    page.close()


def test_a_sampled_race_promises_no_gamma_sweep_and_the_preset_lists_every_drafters_line(browser, served):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(served)
    page.wait_for_selector(DRAWN)
    preset = page.input_value("#preset input")
    drafters = layout.drafter_choices(preset)
    lines = page.locator("#preset-info details.drafter-lines li")
    assert lines.count() == len(drafters) > 1
    page.locator("#preset-info details.drafter-lines summary").click()
    for name, line in zip(drafters, lines.all_inner_texts(), strict=True):
        assert line.startswith(name) and line.endswith(f": {drafter_notes.describe(preset, name)}")
        assert len(line) > len(name) + 20
    summary = page.inner_text("#preset-info details.drafter-lines summary")
    assert re.match(r"The target \(\d[\d.]*[KMB] parameters\) sees the image", summary), summary  # before any run
    shoot(page, "drafter-lines-1400.png")

    # Every text the sweep's note shows during a sampled race, recorded as it changes.
    page.evaluate("""() => { window.sweepNotes = [];
      const note = document.querySelector("#sweep-note");
      new MutationObserver(() => window.sweepNotes.push(note.innerText)).observe(
        note, {subtree: true, childList: true, characterData: true}); }""")
    first_example(page, max_new=24)  # a sampled race, short: what the note says needs no whole answer
    page.get_by_label("sampling").check()
    page.click("#run")
    page.wait_for_selector("#outcome .badge", timeout=180_000)
    page.wait_for_selector("#run:not([disabled])", timeout=60_000)
    seen = page.evaluate("window.sweepNotes") + [page.inner_text("#sweep-note")]
    assert any("greedy races only" in text for text in seen), seen
    assert not any("follows once" in text or "Replaying" in text for text in seen), seen
    page.close()
