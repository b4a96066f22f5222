"""What a race and an analysis yield: one frozen dataclass per kind of news, plain data, so that on
ZeroGPU it crosses the process boundary pickled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from demo.engine.events import Event, Trace
    from demo.engine.grounding import ImageAttention
    from demo.session.rejections import Observation

# --- what a race yields ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Loading:  # a preset loading (lazy deployments only): how far, and what it is doing
    fraction: float
    message: str


@dataclass(frozen=True)
class Ready:  # every lane set up: the page's facts about the drafters, notes on the image
    facts: tuple[str, ...]
    notes: tuple[str, ...]
    request: object = None  # the `Request` as it runs (`budget.fit_race` may shorten it)
    said: str = ""  # the sentence that says the budget shortened it, if it did


@dataclass(frozen=True)
class Lane:  # one engine event of one lane, in the order the race ran them
    name: str
    event: Event


@dataclass(frozen=True)
class Sweeping:  # the γ sweep has replayed the answer at `gamma` (or the table, with `strategy`)
    gamma: int
    strategy: str | None = None


@dataclass(frozen=True)
class Swept:  # the γ sweep's rows (or why none), each lane's image attention, the strategies' table
    rows: tuple[dict, ...]
    why_not: str | None = None
    attention: tuple[tuple[str, ImageAttention, dict | None], ...] = ()  # (lane, attention, ablation)
    strategies: tuple[dict, ...] = ()


# --- what an analysis yields ----------------------------------------------------------------------


@dataclass(frozen=True)
class Running:  # the analysis is about to decode example `example` (its index) with `drafter`
    example: int
    drafter: str


@dataclass(frozen=True)
class Decoded:  # that run's trace, its rejections by word category, whether the answer is right
    example: int
    drafter: str
    trace: Trace
    observations: list[Observation]
    correct: bool
