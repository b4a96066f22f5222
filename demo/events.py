"""The event stream: the contract between the decoding core and everything else.

`demo.speculative` yields these dataclasses while it decodes; the UI, the charts, the
benchmark, the exports and the tests only ever read them. One run produces, in order:

    PrefillEvent
    (TokenEvent+ RoundEvent)*      one group per target forward in decoding
    RunSummary

Every event carries `t`: seconds of compute this run has used so far (prefill included),
measured by the run's own clock, which stops while the consumer holds the generator. Two
runs can therefore be raced fairly by whatever consumes them (see `demo.race`).

Token kinds:
    "target"     produced by the target alone: the prefill's token, and every token of an
                 autoregressive run
    "accepted"   drafted by the drafter and accepted by the target
    "resampled"  the target's replacement for the first rejected draft of a round
    "bonus"      the extra token the target samples when every draft of a round was accepted
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

TOKEN_KINDS = ("target", "accepted", "resampled", "bonus")


@dataclass(frozen=True)
class PrefillEvent:
    mode: str  # "speculative" | "autoregressive"
    prompt_tokens: int  # target prompt length, image placeholders included
    drafter_prompt_tokens: int  # 0 for autoregressive runs
    target_seconds: float  # target forward over the prompt (image encoded here, once)
    drafter_seconds: float  # drafter forward over its own prompt; 0 for autoregressive
    t: float


@dataclass(frozen=True)
class TokenEvent:
    index: int  # position in the answer, 0-based
    token_id: int
    text: str  # incremental text piece; pieces concatenate to the decoded answer
    kind: str  # one of TOKEN_KINDS
    round: int  # 0 = prefill, then 1, 2, ... one per target forward in decoding
    p: float  # target probability of this token (warped as used for the decision)
    q: float | None = None  # draft probability, for accepted tokens
    accept_prob: float | None = None  # min(1, p/q) for accepted tokens (greedy: 1.0)
    rejected_id: int | None = None  # for "resampled": the draft the target rejected
    rejected_text: str | None = None
    rejected_p: float | None = None
    rejected_q: float | None = None
    rejected_accept_prob: float | None = None  # min(1, p/q) of that draft (greedy: 0.0)
    t: float = 0.0


@dataclass(frozen=True)
class RoundEvent:
    index: int  # 1, 2, ...: one per target forward in decoding
    drafted_ids: tuple[int, ...]  # what the drafter proposed (empty for autoregressive)
    drafted_texts: tuple[str, ...]  # each draft decoded on its own, for display
    n_accepted: int  # leading drafts the target accepted
    target_id: int  # the target's own token: the resample, or the bonus
    n_emitted: int  # tokens this round added to the answer (after any stop truncation)
    stop: str | None  # "eos" or "max_new_tokens" when the run ends in this round
    draft_seconds: float
    verify_seconds: float
    t: float


@dataclass(frozen=True)
class RunSummary:
    mode: str
    token_ids: tuple[int, ...]
    text: str
    stop: str  # "eos" | "max_new_tokens"
    gamma: int  # 0 for autoregressive
    drafter: str | None  # drafter name, None for autoregressive
    target_params: int
    drafter_params: int  # 0 for autoregressive
    prefill_seconds: float  # target + drafter prefill
    decode_seconds: float  # everything after prefill
    target_forwards: int  # in decoding (prefill excluded)
    t: float


Event = PrefillEvent | TokenEvent | RoundEvent | RunSummary


@dataclass
class Trace:
    """All events of one run, split by type. Built incrementally by consumers."""

    prefill: PrefillEvent | None = None
    tokens: list[TokenEvent] = field(default_factory=list)
    rounds: list[RoundEvent] = field(default_factory=list)
    summary: RunSummary | None = None
    t: float = 0.0  # compute seconds used so far: the latest event's clock

    def add(self, event: Event) -> None:
        self.t = event.t
        if isinstance(event, TokenEvent):
            self.tokens.append(event)
        elif isinstance(event, RoundEvent):
            self.rounds.append(event)
        elif isinstance(event, PrefillEvent):
            self.prefill = event
        elif isinstance(event, RunSummary):
            self.summary = event
        else:
            raise TypeError(f"not an event: {event!r}")

    @classmethod
    def of(cls, events) -> Trace:
        trace = cls()
        for event in events:
            trace.add(event)
        return trace

    @property
    def done(self) -> bool:
        return self.summary is not None

    @property
    def text(self) -> str:
        return "".join(tok.text for tok in self.tokens)

    def to_dict(self) -> dict:
        return {
            "prefill": asdict(self.prefill) if self.prefill else None,
            "tokens": [asdict(t) for t in self.tokens],
            "rounds": [asdict(r) for r in self.rounds],
            "summary": asdict(self.summary) if self.summary else None,
        }
