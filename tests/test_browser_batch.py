"""The Analysis tab opens a batch's results in a real browser, at 1400 and 420 px: a batch's files
(made by the batch's own worker and writer, in process: no Ray here) named by their folder, read
back to the same charts, sentences and tables as a live analysis. Screenshots: batch-open-1400.png,
batch-open-420.png, where tests/test_browser.py puts its own."""

import pyarrow as pa
import pytest
from test_browser import EMBEDDED, browser, served, shoot  # noqa: F401 (fixtures)

from demo.lab.bench.page import DRAWN

pytestmark = pytest.mark.slow
SETTINGS = {"gamma": 4, "greedy": True, "temperature": 1.0, "top_p": 1.0, "seed": 0, "max_new_tokens": 48}


@pytest.fixture(scope="module")
def batch_folder(tmp_path_factory):
    from demo.batch import inputs, run, worker

    world = {"task": "vqa", "n": 2, "seed": 0, "languages": ["en"]}
    out = tmp_path_factory.mktemp("batch")
    made = worker.Worker("embedded", ["text-only", "image-aware"], SETTINGS, world)(inputs.world("vqa", 2, 0, ("en",)))
    tables = {name: [t for t in map(worker.rows, made[name].to_pylist()) if t is not None] for name in worker.TABLES}
    run._commit(out, {name: parts for name, parts in tables.items()})
    counts = run.consolidate(out)
    asked = {
        "preset": "embedded",
        "drafters": ["text-only", "image-aware"],
        "settings": SETTINGS,
        "source": {"world": world},
    }
    run._manifest(out, asked, world, 1, 0.0, {}, run._now(), counts, 0)
    assert pa.concat_tables(tables["examples"]).num_rows == 4
    return out


@pytest.mark.skipif(not EMBEDDED, reason="the batch's examples are the embedded world's")
def test_the_analysis_tab_opens_a_batch_folder_with_its_charts_and_tables(browser, served, batch_folder):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(served)
    page.wait_for_selector(DRAWN)
    page.get_by_role("tab", name="Analysis").click()
    page.get_by_text("Open a batch's results").click()
    page.fill("#an-open-folder textarea, #an-open-folder input", str(batch_folder))
    page.click("#an-open-run")
    page.wait_for_function("document.querySelector('#an-status').innerText.includes('Opened a batch')", timeout=60_000)
    status = page.inner_text("#an-status")
    assert "2 examples, 4 runs of text-only, image-aware, greedy, γ = 4" in status and "not run here" in status
    for width in (1400, 420):
        page.set_viewport_size({"width": width, "height": 1000})
        page.wait_for_timeout(400)
        headline = page.inner_text("#an-headline")
        assert "compared on the 2 of 2 examples every drafter finished" in headline, headline
        assert "95%" in headline
        assert page.locator("#an-chart-category .js-plotly-plot").count() == 1
        assert "whiskers: 95% Wilson interval" in page.inner_text("#an-chart-category")
        assert page.locator("#an-runs [data-testid='cell-3-0']").count() == 1  # the fourth run's row
        assert page.locator("#an-headline").bounding_box()["width"] <= width
        shoot(page, f"batch-open-{width}.png")
    page.locator("#an-runs [data-testid='cell-0-3']").click()  # a run's row: its answer and rejections
    page.wait_for_function("document.querySelector('#an-trace-view').innerText.includes('read from a batch')")
    assert not page.locator("#an-to-race").is_visible()  # a batch's run has no image to race
    page.close()
