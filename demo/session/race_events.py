"""What a race and an analysis yield: one frozen dataclass per kind of news, plain data, so that on
ZeroGPU it crosses the process boundary pickled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from demo.engine.events import Event, Trace
    from demo.engine.grounding import ImageAttention
    from demo.session.rejections import Observation


# --- what a race yields (plain data: on ZeroGPU it crosses a process boundary, pickled) ---------


@dataclass(frozen=True)
class Loading:
    """A preset loading (lazy deployments only): how far, and what it is doing."""

    fraction: float
    message: str


@dataclass(frozen=True)
class Ready:
    """Every lane set up: what the page says of the drafters (first, where the budget shortened
    the race, the sentence that says so: `said`), notes on the image, and the request as it runs."""

    facts: tuple[str, ...]
    notes: tuple[str, ...]
    request: object = None  # the `Request` raced (`budget.fit_race`: max new tokens as it runs)
    said: str = ""


@dataclass(frozen=True)
class Lane:
    """One engine event of one lane, in the order the race ran them."""

    name: str
    event: Event


@dataclass(frozen=True)
class Sweeping:
    """The γ sweep has replayed the answer at draft length `gamma` (with `strategy`: the table of
    strategies has replayed it with that drafter, at the race's gamma)."""

    gamma: int
    strategy: str | None = None


@dataclass(frozen=True)
class Swept:
    """The γ sweep of the finished race: records by gamma (`gamma_sweep.rows`), or none and why;
    each finished lane's image attention and ablation (`image_attention.attach`), read after the
    sweep; and the table of every drafting strategy on this prompt (`strategies.compare`)."""

    rows: tuple[dict, ...]
    why_not: str | None = None
    attention: tuple[tuple[str, ImageAttention, dict | None], ...] = ()  # (lane, attention, ablation)
    strategies: tuple[dict, ...] = ()


# --- what an analysis yields ---------------------------------------------------------------------


@dataclass(frozen=True)
class Running:
    """The analysis is about to decode example `example` (its index) with drafter `drafter`."""

    example: int
    drafter: str


@dataclass(frozen=True)
class Decoded:
    """Example `example` decoded with `drafter`: its trace, its rejections by word category
    (`demo.session.rejections.observations`) and whether the answer is right (`world.scoring.score`)."""

    example: int
    drafter: str
    trace: Trace
    observations: list[Observation]
    correct: bool
