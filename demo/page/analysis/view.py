"""The Analysis tab's views, pure functions of a batch of runs: its headline in sentences, the
tables, the recorded trace of one run, and the exports.

Every number comes from `demo.session.rejections` and `demo.engine.metrics` over the runs' events.
"""

from __future__ import annotations

import csv
import html
import io
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from demo.engine import export, metrics
from demo.page import attention_view, blocks, render
from demo.session import image_rejections, rejections
from demo.session.batches import ALL_LANGUAGES, TASK_KINDS
from demo.world.tasks import LANGUAGE_NAMES, TASKS

if TYPE_CHECKING:
    from demo.engine.events import Trace
    from demo.world.tasks import Example

TASK_CHOICES = [("all tasks, mixed", "all"), ("vqa, all five kinds", "vqa")]
TASK_CHOICES += [(t.replace("_", " "), t) for t in TASKS]
TOP_WORDS = 12  # most-rejected words listed per drafter

# --- a batch of runs and what is shown of it (pure) -------------------------------------------


@dataclass
class Run:
    number: int  # 1, 2, ...: the row's "#" in the table
    example: int  # which example of the batch (the same for every drafter)
    item: Example
    drafter: str
    trace: Trace
    obs: list[rejections.Observation]
    correct: bool  # the answer, scored against the scene by demo.world.scoring
    language: str = "en"  # the example's language: "en", "de" or "zh"


@dataclass
class Batch:
    preset: str
    task: str  # a key of TASK_KINDS
    drafters: list[str]
    gamma: int
    n: int
    seed: int
    max_new_tokens: int
    runs: list[Run] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the whole batch, models loaded
    language: str = "en"  # a language of the world, or ALL_LANGUAGES

    def settings(self) -> dict:
        return {
            "preset": self.preset,
            "task": self.task,
            "language": self.language,
            "drafters": self.drafters,
            "gamma": self.gamma,
            "n": self.n,
            "seed": self.seed,
            "decoding": "greedy",
            "max_new_tokens": self.max_new_tokens,
            "split": "heldout",
        }


def language_choices(spoken: tuple[str, ...]) -> list[tuple[str, str]]:
    """The language control's (label, value) choices: each language the world speaks, then all
    of them together when there is more than one."""
    named = [(LANGUAGE_NAMES[lang], lang) for lang in spoken]
    return named + [("all languages", ALL_LANGUAGES)] if len(spoken) > 1 else named


def examples_for(task: str, n: int, seed: int, languages: tuple[str, ...] = ("en",)) -> list[Example]:
    """n held-out examples, cycling through the world tasks a choice covers; with several
    languages, each example is asked in each language in turn (`rejections.heldout_mix`)."""
    return rejections.heldout_mix(TASK_KINDS[task], n, seed, languages)


def _languages(batch: Batch) -> list[str]:
    """The languages of a batch's runs, in the order the world lists them."""
    held = {r.language for r in batch.runs}
    return [lang for lang in LANGUAGE_NAMES if lang in held]


def several_languages(batch: Batch | None) -> bool:
    """Whether a batch's runs are in more than one language (then it is broken down by language)."""
    return batch is not None and len(_languages(batch)) > 1


def by_language(batch: Batch) -> list[dict]:
    """Per language, then drafter, over its runs: pooled tau and alpha, answers correct, and
    how many drafts on image-grounded words the target accepted."""
    out = []
    for lang in _languages(batch):
        for d in batch.drafters:
            runs = [r for r in batch.runs if r.language == lang and r.drafter == d]
            if not runs:
                continue
            pooled = metrics.pooled([r.trace for r in runs])
            g = rejections.grounded_share([o for r in runs for o in r.obs])
            accepted = g["grounded_drafted"] - g["grounded_rejected"]
            out.append(
                {
                    "language": lang,
                    "drafter": d,
                    "runs": len(runs),
                    "tau": metrics.tau(pooled),
                    "alpha": metrics.alpha(pooled),
                    "correct": sum(r.correct for r in runs),
                    "grounded_drafted": g["grounded_drafted"],
                    "grounded_accepted": accepted,
                    "grounded_acceptance": accepted / g["grounded_drafted"] if g["grounded_drafted"] else math.nan,
                }
            )
    return out


def summaries(batch: Batch) -> dict[str, dict]:
    """Each drafter's aggregates over its runs so far."""
    return {
        d: rejections.summary([o for r in batch.runs if r.drafter == d for o in r.obs], TOP_WORDS)
        for d in batch.drafters
    }


def _pct(x: float) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.0%}"


def _num(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.2f}"


def headline_html(batch: Batch | None, sums: dict[str, dict]) -> str:
    """The numbers in sentences, one per drafter, then the drafters compared on grounded words."""
    if batch is None or not batch.runs:
        return (
            '<div class="an-headline">Pick a task, a drafter and how many examples, then press '
            "<b>Run analysis</b>.</div>"
        )
    lines = []
    for d, s in sums.items():
        g = s["grounded"]
        if not g["drafted"]:
            continue
        if not g["rejected"]:
            lines.append(f"<p><b>{html.escape(d)}</b>: the target accepted all {g['drafted']} drafts.</p>")
            continue
        if not g["grounded_drafted"]:
            lines.append(
                f"<p><b>{html.escape(d)}</b> drafter: no image-grounded word was drafted; the target "
                f"rejects {_pct(g['other_rejection_rate'])} of its drafts.</p>"
            )
            continue
        # "but" only where the two shares differ as the sentence shows them (whole percents)
        shown = [_pct(g["grounded_share_of_rejections"]), _pct(g["grounded_share_of_drafted"])]
        joint = (
            "but"
            if shown[0] != shown[1] and g["grounded_share_of_rejections"] > g["grounded_share_of_drafted"]
            else "and"
        )
        lines.append(
            f"<p><b>{html.escape(d)}</b> drafter: image-grounded words are "
            f"<b>{_pct(g['grounded_share_of_drafted'])}</b> of drafted positions {joint} "
            f"<b>{_pct(g['grounded_share_of_rejections'])}</b> of rejections; the target rejects "
            f"{_pct(g['grounded_rejection_rate'])} of drafts on them, {_pct(g['other_rejection_rate'])} elsewhere.</p>"
        )
    rates = {d: s["grounded"]["grounded_rejection_rate"] for d, s in sums.items()}
    if len(rates) > 1 and not any(math.isnan(r) for r in rates.values()):
        ranked = sorted(rates, key=rates.get)
        said = ", the ".join(f"<b>{html.escape(d)}</b> drafter's {_pct(rates[d])}" for d in ranked)
        lines.append(f"<p>Rejected on image-grounded words: the {said}.</p>")
    breakdown = by_language(batch) if several_languages(batch) else []
    for b in breakdown:
        lines.append(
            f"<p><b>{LANGUAGE_NAMES[b['language']]}</b>, {html.escape(b['drafter'])} drafter: τ = {_num(b['tau'])}, "
            f"α = {_pct(b['alpha'])}, {b['correct']}/{b['runs']} answers correct, "
            f"{_pct(b['grounded_acceptance'])} of drafts on image-grounded words accepted.</p>"
        )
    done = len({r.example for r in batch.runs})
    lines.append(
        f'<p class="n">{done} example{"s" * (done != 1)} · '
        f"{sum(s['grounded']['drafted'] for s in sums.values())} drafted positions checked · "
        f"greedy · γ = {batch.gamma}</p>"
    )
    views = attention_view.attention_html(batch) + attention_view.dependence_html(batch)
    return f'<div class="an-headline">{"".join(lines)}{views}</div>'


WORD_COLUMNS = ["drafter", "word", "category", "rejected", "drafted", "rejected %", "drafter wrote instead"]
RUN_COLUMNS = ["#", "task", "drafter", "question", "answer", "τ", "α %", "rejected", "on grounded words", "correct"]
LANGUAGE_COLUMNS = ["language", "drafter", "runs", "τ", "α %", "correct", "grounded accepted %"]


def words_table(sums: dict[str, dict]) -> pd.DataFrame:
    rows = [
        [
            d,
            w["word"],
            w["category"],
            w["rejected"],
            w["drafted"],
            round(100 * w["rejection_rate"], 1),
            w["drafter_said"],
        ]
        for d, s in sums.items()
        for w in s["most_rejected"]
    ]
    return pd.DataFrame(rows, columns=WORD_COLUMNS)


def _short(text: str, n: int) -> str:
    """The first line of a text, cut to n characters; "…" marks anything left out."""
    whole = text.strip()
    line = whole.split("\n")[0][: n - 1]
    return line if line == whole else line + "…"


def _round(x: float, digits: int) -> float | None:
    return None if math.isnan(x) else round(x, digits)


def languages_table(batch: Batch | None) -> pd.DataFrame:
    """One row per language and drafter (`by_language`)."""
    rows = [
        [
            LANGUAGE_NAMES[b["language"]],
            b["drafter"],
            b["runs"],
            _round(b["tau"], 2),
            _round(100 * b["alpha"], 1),
            f"{b['correct']}/{b['runs']}",
            _round(100 * b["grounded_acceptance"], 1),
        ]
        for b in (by_language(batch) if batch else [])
    ]
    return pd.DataFrame(rows, columns=LANGUAGE_COLUMNS)


def run_columns(multilingual: bool) -> list[str]:
    """The runs table's columns: a language column last where the world speaks more than English."""
    return RUN_COLUMNS + ["language"] * multilingual


def run_row(run: Run, multilingual: bool = False) -> list:
    share = rejections.grounded_share(run.obs)
    alpha = metrics.alpha(run.trace)
    language = [LANGUAGE_NAMES[run.language]] * multilingual
    return [
        run.number,
        run.item.task.replace("_", " "),
        run.drafter,
        _short(run.item.question, 60),
        _short(run.trace.summary.text, 60),
        round(metrics.tau(run.trace), 2),
        None if math.isnan(alpha) else round(100 * alpha, 1),
        share["rejected"],
        share["grounded_rejected"],
        "✓" if run.correct else "✗",
        *language,
    ]


def runs_table(batch: Batch | None, multilingual: bool = False) -> pd.DataFrame:
    rows = [run_row(r, multilingual) for r in batch.runs] if batch else []
    return pd.DataFrame(rows, columns=run_columns(multilingual))


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
                "answer": r.trace.summary.text,
                "correct": r.correct,
                "tau": metrics.tau(r.trace),
                "alpha": metrics.alpha(r.trace),
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
                {d: [o for r in batch.runs if r.drafter == d for o in r.obs] for d in batch.drafters}
            ),
            "runs": runs,
        }
    )


def status_html(text: str, fraction: float | None = None, error: bool = False) -> str:
    bar = f'<progress max="100" value="{100 * fraction:.0f}"></progress>' if fraction is not None else ""
    cls = "an-status error-box" if error else "an-status"
    return f'<div class="{cls}">{bar}{html.escape(text)}</div>'


def run_html(run: Run | None, gamma: int = 0) -> str:
    """One run's recorded trace: its question and reference, the coloured answer, each rejection
    with the word's category and what the drafter wrote, and the rounds."""
    if run is None:
        return '<div class="an-note">Select a row of the table to see that run\'s trace here.</div>'
    tau, alpha = metrics.tau(run.trace), metrics.alpha(run.trace)
    task = html.escape(run.item.task.replace("_", " "))
    language = "" if run.language == "en" else f" · {LANGUAGE_NAMES[run.language]}"
    head = (
        f'<div class="an-run-head"><span class="tag">#{run.number} · {task}{language}</span>'
        f"{html.escape(run.drafter)} drafter · γ = {gamma} · greedy · τ = {tau:.2f} · "
        f"α = {_pct(alpha)} · answer {'correct ✓' if run.correct else 'wrong ✗'}</div>"
    )
    question = f'<div class="an-q"><b>Question.</b> {html.escape(run.item.question)}</div>'
    reference = f'<div class="an-q"><b>Reference.</b> {html.escape(run.item.answer)}</div>'
    panel = render.panel_html(run.trace, "Speculative")
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
    )
    return head + question + reference + panel + f"<h4>Rejections ({len(rejected)})</h4>" + table + rounds
