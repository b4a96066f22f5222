"""What a race and an analysis yield: `demo.session.race.gpu_race`'s and `analysis.decode_examples`' items, one
dataclass for each kind of news.

    Loading    a preset loading (lazy deployments only): how far, and what it is doing
    Ready      every lane set up: the page's facts about the drafters, notes on the image
    Lane       one engine event of one lane, in the order the race ran them
    Sweeping   the γ sweep (or the table of strategies) has replayed one more answer
    Swept      the γ sweep, each finished lane's image attention and the table of strategies

    Running    an analysis is about to decode one example with one drafter
    Decoded    that run's trace, where its drafts were rejected, and whether its answer is right

Plain data only, frozen: on ZeroGPU the race runs in another process and these cross its
boundary pickled. The session package re-exports them (`demo.session.Ready`, ...).
"""

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
    and each finished lane's image attention (`image_attention.attach`), read after the sweep; and
    the table of every drafting strategy on this prompt (`strategies.compare`)."""

    rows: tuple[dict, ...]
    why_not: str | None = None
    attention: tuple[tuple[str, ImageAttention], ...] = ()
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
