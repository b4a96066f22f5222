"""A batch's run as the Analysis tab shows it and exports it: one run's recorded trace, the
observations as CSV, the aggregates and runs as JSON. Pure functions of `view.Batch` and `view.Run`."""

from __future__ import annotations

import csv
import html
import io
import math

from demo.engine import export
from demo.page import blocks, render
from demo.page.analysis.view import Batch, Run, by_language, rate, summaries, tau_alpha
from demo.session import image_rejections, rejections
from demo.world.tasks import LANGUAGE_NAMES


def observations_csv(batch: Batch) -> str:
    """One row per observation: which run, example, task and drafter, then the observation."""
    buffer = io.StringIO()
    fields = ["run", "drafter", "task", "language"] + list(rejections.Observation.__dataclass_fields__) + ["grounded"]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in batch.runs:
        for row in rejections.rows(r.obs):
            writer.writerow(
                {
                    "run": r.number,
                    "drafter": r.drafter,
                    "task": r.item.task,
                    "language": r.language,
                    **row,
                    "grounded": rejections.is_grounded(row["category"]),
                }
            )
    return buffer.getvalue()


def record(batch: Batch) -> dict:
    """The aggregates per drafter and a summary of every run, as strict JSON-ready data."""
    runs = []
    for r in batch.runs:
        share = rejections.grounded_share(r.obs)
        runs.append(
            {
                "run": r.number,
                "example": r.example,
                "task": r.item.task,
                "language": r.language,
                "drafter": r.drafter,
                "question": r.item.question,
                "reference": r.item.answer,
                "answer": r.numbers["answer"],
                "correct": r.correct,
                "tau": tau_alpha([r])[0],
                "alpha": r.numbers["accepted"] / r.numbers["drafted"] if r.numbers["drafted"] else math.nan,
                "drafted": share["drafted"],
                "rejected": share["rejected"],
                "grounded_rejected": share["grounded_rejected"],
            }
        )
    return export._strict(
        {
            "settings": batch.settings(),
            "seconds": batch.seconds,
            "by_drafter": summaries(batch),
            "by_language": by_language(batch),
            "by_image_dependence": image_rejections.by_dependence(
                {d: [o for r in batch.compared() if r.drafter == d for o in r.obs] for d in batch.drafters}
            ),
            "runs": runs,
        }
    )


def run_html(run: Run | None, gamma: int = 0) -> str:
    """One run's recorded trace: its question and reference, the coloured answer, each rejection
    with the word's category and what the drafter wrote, and the rounds."""
    if run is None:
        return '<div class="an-note">Select a row of the table to see that run\'s trace here.</div>'
    tau, accepted, drafted = tau_alpha([run])
    task = html.escape(run.item.task.replace("_", " "))
    language = "" if run.language == "en" else f" · {LANGUAGE_NAMES[run.language]}"
    head = (
        f'<div class="an-run-head"><span class="tag">#{run.number} · {task}{language}</span>'
        f"{html.escape(run.drafter)} drafter · γ = {gamma} · τ = {tau:.2f} · "
        f"α = {rate(accepted, drafted)} · answer {({True: 'correct ✓', False: 'wrong ✗'}).get(run.correct, 'not scored')}</div>"
    )
    question = f'<div class="an-q"><b>Question.</b> {html.escape(run.item.question)}</div>'
    reference = f'<div class="an-q"><b>Reference.</b> {html.escape(run.item.answer)}</div>'
    panel = (
        render.panel_html(run.trace, "Speculative")
        if run.trace
        else f'<div class="an-q"><b>Answer.</b> {html.escape(run.numbers["answer"])} <i>(read from a batch: '
        "its tokens, one row each, are in tokens.parquet)</i></div>"
    )
    rejected = [o for o in run.obs if not o.accepted]
    rows = "".join(
        f'<tr><td>{o.index}</td><td class="{"grounded" if rejections.is_grounded(o.category) else ""}">'
        f"{html.escape(o.word or o.token.strip() or repr(o.token))}</td><td>{html.escape(o.category)}</td>"
        f"<td>{html.escape(o.draft_word)}</td></tr>"
        for o in rejected
    )
    table = (
        f'<table class="an-rej"><tr><th>position</th><th>the target wrote</th><th>category</th>'
        f"<th>the drafter wrote</th></tr>{rows}</table>"
        if rejected
        else "<p>No draft was rejected.</p>"
    )
    rounds = (
        f"<details><summary>Round by round ({len(run.trace.rounds)} rounds)</summary>"
        f"{blocks.blocks_html(run.trace)}</details>"
        if run.trace
        else ""
    )
    return head + question + reference + panel + f"<h4>Rejections ({len(rejected)})</h4>" + table + rounds
