"""The Analysis tab's sampling-law check over a batch (issue 56): the first examples of the tab's
batch (at most `batch_law.MAX_EXAMPLES`), each checked live as the Race tab's "Check exactness"
checks one (`demo.session.exactness`), with the first drafter chosen; a table of each example's
verdicts, and the pooled verdict of each way in one sentence (`batch_law.pooled`). It streams a
row as each example is checked, and is also the `/analysis_law` endpoint.
"""

from __future__ import annotations

import html
import math

import gradio as gr
import pandas as pd

from demo.page.analysis.view import examples_for, status_html
from demo.page.runs import page_error
from demo.session import batch_law, batches, failures

COLUMNS = ["#", "task", "question", "draws", "TV lane", "p lane", "TV broken", "p broken", "verdict"]
NOTE = (
    f"Samples the {batch_law.K} tokens after the first, up to {batch_law.N} times each way (the target alone, the "
    f"lane, and a broken rule that accepts every draft), on the first {batch_law.MAX_EXAMPLES} examples of the "
    f"batch, at temperature 1, with the first drafter chosen: {batch_law.SHARE:.0f} s of draws an example, within "
    "the work budget like the analysis. "
    "A way fails where its p-value is at most 0.001; the pooled verdict combines the examples (Fisher)."
)


def _row(i: int, item, r: dict) -> list:
    p, tv = r["p_value"], r["tv"]
    verdict = "lane exact" if p["speculative"] > batch_law.ALPHA else "lane FAILS"
    verdict += ", broken fails" if p["broken"] <= batch_law.ALPHA else ", broken not caught"
    question = item.question if len(item.question) <= 50 else item.question[:49] + "…"
    lane = [round(tv["speculative"], 3), round(p["speculative"], 4)]
    broken = [round(tv["broken"], 3), round(p["broken"], 4)]
    return [i + 1, item.task.replace("_", " "), question, r["n"], *lane, *broken, verdict]


def pooled_html(results: list[dict], done: bool, cut: str = "") -> str:
    """The pooled verdict of each way so far, after `cut` (how the check was cut short, if it was)."""
    if not results:
        return status_html("No law check yet." if done else "Checking the first example…", None if done else 0.0)
    verdict = batch_law.pooled(results)

    def said(way: str, name: str) -> str:
        v = verdict[way]
        p = "–" if math.isnan(v["p_value"]) else f"{v['p_value']:.2g}"
        word = "passes" if v["passed"] else "fails"
        return f"<b>{name}</b> {word} (pooled p = {p}; {v['failed']} of {v['examples']} examples fail alone)"

    head = f"{len(results)} example{'s' * (len(results) != 1)} checked{'' if done else ' so far'}: "
    body = "; ".join(
        said(w, n)
        for w, n in (("speculative", "the lane"), ("broken", "the broken rule"), ("target", "the target alone"))
    )
    cut = f"<b>{html.escape(cut)}</b> " if cut else ""
    return f'<div class="an-status an-law">{cut}{html.escape(head)}{body}.</div>'


def check_law(preset, task, drafter, gamma, n, seed, language="en"):
    """Stream (note, table) as each of the first examples of the tab's batch is checked."""
    try:
        request = batches.parse_analysis(
            preset=preset, task=task, drafter=drafter, gamma=gamma, n=n, seed=seed, language=language
        )
        count = min(request.n, batch_law.MAX_EXAMPLES)
        items = examples_for(request.task, count, request.seed, request.languages[:1])[:count]
        batch = batch_law.LawBatch(request.preset, request.drafters[0], items, request.gamma, seed=request.seed)
        results, rows = [], []
        yield pooled_html(results, False), pd.DataFrame(rows, columns=COLUMNS)
        for i, result in enumerate(batch.results()):
            results.append(result)
            rows.append(_row(i, items[i], result))
            yield pooled_html(results, i + 1 == len(items)), pd.DataFrame(rows, columns=COLUMNS)
        if batch.ending != "finished":  # the budget's limit (or a Stop) ended it after the example at hand
            cut = f"Stopped: {batch.ending} after {len(results)} of {len(items)} examples"
            if batch.ending == "over budget":
                cut += f" (this deployment gives this check {batch.deadline.seconds:.0f} s)"
            yield pooled_html(results, True, cut + "."), pd.DataFrame(rows, columns=COLUMNS)
    except Exception as error:
        raise page_error(failures.message(error)) from None


def law_section(preset, task, drafter, gamma, n, seed, language) -> None:
    """Lay the check out in the current Blocks context and wire it to the tab's controls."""
    with gr.Accordion("Check the sampling law on these examples", open=False, elem_id="an-law"):
        gr.Markdown(NOTE, elem_classes="an-note")
        go = gr.Button("Check the sampling law", elem_id="an-law-run", size="sm")
        note = gr.HTML(pooled_html([], True), label="pooled law verdicts", elem_id="an-law-note")
        table = gr.Dataframe(
            pd.DataFrame([], columns=COLUMNS),
            label="Law check per example",
            interactive=False,
            wrap=True,
            elem_id="an-law-table",
        )
    go.click(
        check_law,
        [preset, task, drafter, gamma, n, seed, language],
        [note, table],
        api_name="analysis_law",
        show_progress="hidden",
        concurrency_limit=1,
        concurrency_id="analysis",
        preprocess=False,
    )
