"""The Analysis tab's views, pure functions of a batch of runs: its headline in sentences, the
tables, the recorded trace of one run, and the exports.

Every number comes from `demo.session.rejections` and `demo.engine.metrics` over the runs' events.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from demo.engine import metrics
from demo.page import attention_view
from demo.page.analysis.charts import wilson
from demo.session import rejections
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
    trace: Trace | None  # None for a run read back from a batch's files (`opened`)
    obs: list[rejections.Observation]
    correct: bool | None  # the answer, scored against the scene by demo.world.scoring (None: no scene)
    language: str = "en"  # the example's language: "en", "de" or "zh"
    numbers: dict = field(default_factory=dict)  # `numbers(trace)`: what the tables show of the trace

    def __post_init__(self):
        if not self.numbers and self.trace is not None:
            self.numbers = numbers(self.trace)


def numbers(trace: Trace) -> dict:
    """The counts the views read off a run's trace (a batch's examples.parquet holds the same)."""
    return {
        "answer": trace.summary.text,
        "decode_tokens": metrics.decode_tokens(trace),
        "rounds": len(trace.rounds),
        "drafted": metrics.drafted(trace),
        "accepted": metrics.accepted(trace),
    }


def tau_alpha(runs: list[Run]) -> tuple[float, int, int]:
    """Pooled τ over runs, and α as accepted of drafted (the counts, for its interval)."""
    rounds = sum(r.numbers["rounds"] for r in runs)
    tau = sum(r.numbers["decode_tokens"] for r in runs) / rounds if rounds else math.nan
    return tau, sum(r.numbers["accepted"] for r in runs), sum(r.numbers["drafted"] for r in runs)


def rate(k: int, n: int) -> str:
    """A rate as every text and table gives it: percent, count and 95% Wilson interval."""
    span = wilson(k, n)
    if span is None:
        return "– (0 drafted)"
    return f"{k / n:.0%} ({k}/{n}; 95% {span[0]:.0%}–{span[1]:.0%})"


def separated(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two rates' (k, n) 95% Wilson intervals do not overlap."""
    x, y = wilson(*a), wilson(*b)
    return bool(x and y) and (x[1] < y[0] or y[1] < x[0])


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
    decoding: str = "greedy"  # or "sampled" (a batch run with --sampled)
    opened: str = ""  # the folder or files a batch was read back from (`opened`); "" for a live one

    def compared(self) -> list[Run]:
        """The runs on the examples every drafter of the batch finished: what its aggregates use (a
        stopped analysis may have run some drafters on one example more)."""
        done = [{r.example for r in self.runs if r.drafter == d} for d in self.drafters]
        kept = set.intersection(*done) if done else set()
        return [r for r in self.runs if r.example in kept]

    def settings(self) -> dict:
        return {
            "preset": self.preset,
            "task": self.task,
            "language": self.language,
            "drafters": self.drafters,
            "gamma": self.gamma,
            "n": self.n,
            "seed": self.seed,
            "decoding": self.decoding,
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
            runs = [r for r in batch.compared() if r.language == lang and r.drafter == d]
            if not runs:
                continue
            tau, accepted_drafts, drafted = tau_alpha(runs)
            g = rejections.grounded_share([o for r in runs for o in r.obs])
            accepted = g["grounded_drafted"] - g["grounded_rejected"]
            row = dict(
                language=lang,
                drafter=d,
                runs=len(runs),
                tau=tau,
                alpha=accepted_drafts / drafted if drafted else math.nan,
            )
            row |= dict(accepted=accepted_drafts, drafted=drafted, correct=sum(bool(r.correct) for r in runs))
            share = accepted / g["grounded_drafted"] if g["grounded_drafted"] else math.nan
            out.append(
                row
                | dict(grounded_drafted=g["grounded_drafted"], grounded_accepted=accepted, grounded_acceptance=share)
            )
    return out


def summaries(batch: Batch) -> dict[str, dict]:
    """Each drafter's aggregates over the examples every drafter finished (`Batch.compared`)."""
    runs = batch.compared()
    return {
        d: rejections.summary([o for r in runs if r.drafter == d for o in r.obs], TOP_WORDS) for d in batch.drafters
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
    lines = [f"<p>The drafters are {compared(batch)}.</p>"] if len(batch.drafters) > 1 else []
    for d, s in sums.items():
        g = s["grounded"]
        name = f"<b>{html.escape(d)}</b> drafter"
        if not g["drafted"]:
            continue
        if not g["rejected"]:
            lines.append(f"<p><b>{html.escape(d)}</b>: the target accepted all {g['drafted']} drafts.</p>")
            continue
        other = (g["rejected"] - g["grounded_rejected"], g["drafted"] - g["grounded_drafted"])
        if not g["grounded_drafted"]:
            lines.append(
                f"<p>{name}: no image-grounded word was drafted; the target rejects {rate(*other)} of its drafts.</p>"
            )
            continue
        # "but" only where the two shares differ as the sentence shows them (whole percents)
        shown = [_pct(g["grounded_share_of_rejections"]), _pct(g["grounded_share_of_drafted"])]
        higher = g["grounded_share_of_rejections"] > g["grounded_share_of_drafted"]
        joint = "but" if shown[0] != shown[1] and higher else "and"
        lines.append(
            f"<p>{name}: image-grounded words are {rate(g['grounded_drafted'], g['drafted'])} of drafted positions "
            f"{joint} {rate(g['grounded_rejected'], g['rejected'])} of rejections; the target rejects "
            f"{rate(g['grounded_rejected'], g['grounded_drafted'])} of drafts on them, {rate(*other)} elsewhere.</p>"
        )
    lines += _ranked(sums)
    breakdown = by_language(batch) if several_languages(batch) else []
    for b in breakdown:
        lines.append(
            f"<p><b>{LANGUAGE_NAMES[b['language']]}</b>, {html.escape(b['drafter'])} drafter: τ = {_num(b['tau'])}, "
            f"α = {rate(b['accepted'], b['drafted'])}, {rate(b['correct'], b['runs'])} answers correct, "
            f"{rate(b['grounded_accepted'], b['grounded_drafted'])} of drafts on image-grounded words accepted.</p>"
        )
    done = len({r.example for r in batch.compared()})
    decoding = batch.decoding
    lines.append(
        f'<p class="n">{done} example{"s" * (done != 1)} · '
        f"{sum(s['grounded']['drafted'] for s in sums.values())} drafted positions checked · "
        f"{decoding} · γ = {batch.gamma}</p>"
    )
    views = attention_view.attention_html(batch) + attention_view.dependence_html(batch)
    return f'<div class="an-headline">{"".join(lines)}{views}</div>'


def compared(batch: Batch) -> str:
    """How many examples the drafters are compared on: those every one of them finished."""
    kept, run = len({r.example for r in batch.compared()}), len({r.example for r in batch.runs})
    return f"compared on the {kept} of {run} example{'s' * (run != 1)} every drafter finished"


def _ranked(sums: dict[str, dict]) -> list[str]:
    """Each pair of drafters' rejection rates on image-grounded words: ranked where their 95%
    intervals separate, and said to be unrankable on these examples where they overlap."""
    counts = {d: (s["grounded"]["grounded_rejected"], s["grounded"]["grounded_drafted"]) for d, s in sums.items()}
    counts = {d: c for d, c in counts.items() if c[1]}
    order = sorted(counts, key=lambda d: counts[d][0] / counts[d][1])
    lines = []
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            said = f"the <b>{html.escape(a)}</b> drafter's {rate(*counts[a])} and the <b>{html.escape(b)}</b> drafter's {rate(*counts[b])}"
            if separated(counts[a], counts[b]):
                lines.append(
                    f"<p>On image-grounded words the target rejects the {html.escape(a)} drafter less often: {said}; their 95% intervals do not overlap.</p>"
                )
            else:
                lines.append(
                    f"<p>On image-grounded words these examples cannot rank {said}: their 95% intervals overlap.</p>"
                )
    return lines


ALPHA = "α: accepted / drafted (95%)"
WORD_COLUMNS = [*"drafter word category rejected drafted".split(), "rejected % (95% interval)", "drafter wrote instead"]
RUN_COLUMNS = ["#", "task", "drafter", "question", "answer", "τ", ALPHA, "rejected", "on grounded words", "correct"]
LANGUAGE_COLUMNS = ["language", "drafter", "runs", "τ", ALPHA, "correct (95%)", "grounded accepted (95%)"]


def words_table(sums: dict[str, dict]) -> pd.DataFrame:
    rows = [
        [d, w["word"], w["category"], w["rejected"], w["drafted"], rate(w["rejected"], w["drafted"]), w["drafter_said"]]
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
        [LANGUAGE_NAMES[b["language"]], b["drafter"], b["runs"], _round(b["tau"], 2), rate(b["accepted"], b["drafted"])]
        + [rate(b["correct"], b["runs"]), rate(b["grounded_accepted"], b["grounded_drafted"])]
        for b in (by_language(batch) if batch else [])
    ]
    return pd.DataFrame(rows, columns=LANGUAGE_COLUMNS)


def run_columns(multilingual: bool) -> list[str]:
    """The runs table's columns: a language column last where the world speaks more than English."""
    return RUN_COLUMNS + ["language"] * multilingual


def run_row(run: Run, multilingual: bool = False) -> list:
    share = rejections.grounded_share(run.obs)
    tau, accepted, drafted = tau_alpha([run])
    texts = [_short(run.item.question, 60), _short(run.numbers["answer"], 60)]
    counts = [_round(tau, 2), rate(accepted, drafted), share["rejected"], share["grounded_rejected"]]
    correct, language = {True: "✓", False: "✗"}.get(run.correct, "–"), [LANGUAGE_NAMES[run.language]] * multilingual
    return [run.number, run.item.task.replace("_", " "), run.drafter, *texts, *counts, correct, *language]


def runs_table(batch: Batch | None, multilingual: bool = False) -> pd.DataFrame:
    rows = [run_row(r, multilingual) for r in batch.runs] if batch else []
    return pd.DataFrame(rows, columns=run_columns(multilingual))


def status_html(text: str, fraction: float | None = None, error: bool = False) -> str:
    bar = f'<progress max="100" value="{100 * fraction:.0f}"></progress>' if fraction is not None else ""
    cls = "an-status error-box" if error else "an-status"
    return f'<div class="{cls}">{bar}{html.escape(text)}</div>'
