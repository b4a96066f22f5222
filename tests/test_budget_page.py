"""The work budget where the results appear: a refusal said inline on both tabs (the earlier
results cleared, no lane left saying "waiting"), not only in a pop-up that vanishes."""

from __future__ import annotations

import gradio as gr
import pytest

from demo.page import handlers
from demo.page.analysis import tab as analysis_tab
from demo.session import budget


def test_an_analysis_refusal_appears_inline_where_its_results_go_and_clears_the_earlier_ones(monkeypatch):
    monkeypatch.setenv(budget.BUDGET_ENV, "0.001")  # not even one example fits
    shown = []
    with pytest.raises(gr.Error) as refused:
        for update in analysis_tab.analyze("embedded", "all", ["text-only", "image-aware"], 4, 8, 0, "en"):
            shown.append(update)
    [update] = shown
    sentence = "This analysis asks for 8 examples x 2 drafters"
    assert sentence in str(refused.value) and sentence in update["status"] and "error-box" in update["status"]
    assert update["batch"] is None and "Analysing" not in str(update["go"])


def test_a_race_refusal_is_said_where_the_outcome_goes_and_its_lanes_say_not_run(monkeypatch):
    monkeypatch.setenv(budget.BUDGET_ENV, "0.001")  # not even 16 tokens fit
    shown = []
    with pytest.raises(gr.Error):
        for update in handlers.run_race(None, "Describe the image.", "embedded", "text-only"):
            shown.append(update)
    [update] = shown
    assert "This race asks for 2 lanes x 128 new tokens" in update["outcome"]
    for panel in ("spd_panel", "ar_panel"):
        assert "not run" in update[panel] and "waiting" not in update[panel]
