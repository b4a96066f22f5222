"""The request: what every surface sends to decode, parsed once by name (`parse`, refusing the first
bad field with its name and range) into a frozen `Request`; `lane_names` says which lanes it races."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from demo.models import presets
from demo.session import validate
from demo.session.validate import InvalidInput

if TYPE_CHECKING:
    from demo.engine.sampling import Sampling

LANES = ("speculative", "autoregressive")  # a race with one drafter
SECOND = "speculative-2"  # the lane of a request's second drafter, when it names one
DEFAULTS = {
    "gamma": 4,
    "greedy": True,
    "temperature": 0.8,
    "top_p": 0.95,
    "seed": 0,
    "max_new_tokens": 128,
    "min_confidence": 0.0,
}
THRESHOLD = "threshold (stop drafting below this drafter confidence; min_confidence on /trace; 0 = off)"


# --- the request --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Request:
    """A validated request: everything a run needs besides the image (made by name only)."""

    question: str
    preset: str
    drafter: str
    gamma: int
    sampling: Sampling
    max_new_tokens: int
    min_confidence: float = 0.0  # adaptive draft length: stop drafting below this top probability; 0 = off
    second_drafter: str | None = None  # the drafter of a second speculative lane (lane SECOND); None: none

    @property
    def drafters(self) -> tuple[str, ...]:
        """The speculative lanes' drafters, in lane order."""
        return (self.drafter,) if self.second_drafter is None else (self.drafter, self.second_drafter)

    def lane_drafter(self, lane: str) -> str | None:
        """The drafter of lane `lane` (None for the autoregressive lane)."""
        drafters = {"speculative": self.drafter, SECOND: self.second_drafter, "autoregressive": None}
        if lane not in drafters or (lane == SECOND and self.second_drafter is None):
            raise KeyError(f"request has no lane {lane!r} (its lanes: {', '.join(lane_names(self))})")
        return drafters[lane]

    def settings(self) -> dict:
        """The request as plain data, with its lanes and their drafters (the trace document's settings)."""
        return asdict(self) | {"lanes": {lane: self.lane_drafter(lane) for lane in lane_names(self)}}


def lane_names(request: Request) -> tuple[str, ...]:
    """A request's lanes in race order (ties go to the first): its speculative lanes, then the
    autoregressive one."""
    return ("speculative", SECOND, "autoregressive") if request.second_drafter is not None else LANES


def parse(
    *,
    question,
    preset,
    drafter,
    gamma=DEFAULTS["gamma"],
    greedy=DEFAULTS["greedy"],
    temperature=DEFAULTS["temperature"],
    top_p=DEFAULTS["top_p"],
    seed=DEFAULTS["seed"],
    max_new_tokens=DEFAULTS["max_new_tokens"],
    min_confidence=DEFAULTS["min_confidence"],
    second_drafter="none",
    known: dict | None = None,
) -> Request:
    """The request from its fields as sent, by name; `known` maps preset names to presets (default
    `presets.PRESETS`). `second_drafter` ("none", "" or None: no second lane) races a second
    speculative lane beside the first (`validate.lane_drafters`). Raises InvalidInput naming the
    first bad value and its valid range."""
    from demo.engine.sampling import Sampling  # torch: imported on first use

    known = presets.PRESETS if known is None else known
    text = validate.question(question)
    preset = validate.choice("model preset", preset, known)
    offered = known[preset]
    drafters = validate.lane_drafters(drafter, second_drafter, offered.drafter_names(), offered.unusable(), preset)
    gamma = validate.integer("gamma (drafts per round)", gamma, *validate.GAMMA_RANGE)
    max_new_tokens = validate.integer("max new tokens", max_new_tokens, *validate.MAX_NEW_RANGE)
    greedy = validate.flag("greedy", greedy)
    temperature = validate.number("temperature", temperature, validate.MIN_TEMPERATURE, validate.MAX_TEMPERATURE)
    top_p = validate.number("top-p", top_p, 0.0, 1.0, low_open=True)
    seed = validate.integer("seed", seed, *validate.SEED_RANGE)  # null refused, as on /analysis
    min_confidence = validate.number(THRESHOLD, min_confidence, 0.0, 1.0)
    for name in drafters:  # e.g. a tree too large for one verify, refused before any work
        refused = offered.refusal(name, gamma, min_confidence)
        if refused:
            raise InvalidInput(validate.sentence(refused))
    sampling = Sampling() if greedy else Sampling(greedy=False, temperature=temperature, top_p=top_p, seed=seed)
    second = drafters[1] if len(drafters) > 1 else None
    return Request(
        question=text,
        preset=preset,
        drafter=drafters[0],
        gamma=gamma,
        sampling=sampling,
        max_new_tokens=max_new_tokens,
        min_confidence=min_confidence,
        second_drafter=second,
    )
