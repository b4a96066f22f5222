"""The event stream: the contract between the decoding core and everything else.

`demo.engine.speculative` yields these dataclasses while it decodes; the UI, the charts, the
benchmark, the exports and the tests only ever read them. One run produces, in order:

    RunStart                       what runs: mode, target, drafter, gamma, sampling, budget
    PrefillEvent
    (TokenEvent+ RoundEvent)*      one group per target forward in decoding
    RunSummary

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:  # a type only: the events import no torch, so the page can read them cheaply
    from demo.engine.grounding import ImageAttention
    from demo.engine.sampling import Sampling

Mode = Literal["speculative", "autoregressive"]
TokenKind = Literal["target", "accepted", "resampled", "bonus"]
Stop = Literal["eos", "max_new_tokens"]
TOKEN_KINDS: tuple[TokenKind, ...] = get_args(TokenKind)


# A drafter's kind: the name of a registered kind (`demo.models.drafter_kinds`), such as "text-only",
# "image-aware", "prompt-lookup" or "self". The registry, not this module, lists them.
DrafterKind = str


@dataclass(frozen=True)
class TreeShape:
    """The shape of a drafted token tree: `branching[d - 1]` children per node at depth d for the
    first levels, then one child per node (chains) down to depth gamma. (2, 2) at gamma 4: 2
    nodes at depth 1, 4 at depth 2, 4 at depths 3 and 4: 14 nodes; 4 * gamma - 2 from gamma 2."""

    branching: tuple[int, ...] = (2, 2)

    def children(self, depth: int) -> int:
        """How many children each node at depth - 1 gets (depth 1: the children of the answer's last token)."""
        return self.branching[depth - 1] if depth <= len(self.branching) else 1

    def describe(self) -> str:
        levels = ", ".join(f"{k} at depth {d}" for d, k in enumerate(self.branching, start=1))
        return f"children per node: {levels}, then 1 (chains) down to depth gamma"

    def nodes(self, gamma: int) -> int:
        """The most nodes a tree of depth gamma holds (fewer where drafting stopped at a stop token)."""
        total, width = 0, 1
        for depth in range(1, gamma + 1):
            width *= self.children(depth)
            total += width
        return total


TREE_SHAPE = TreeShape((2, 2))  # the trees "<drafter>+tree" drafts
MAX_TREE_NODES = 32  # the most nodes one verify forward scores (gamma 8 with TREE_SHAPE: 30)


def tree_refusal(shape: TreeShape, gamma: int, min_confidence: float = 0.0) -> str | None:
    """Why a tree run with these settings cannot run (the limit in the sentence), or None. Here,
    beside the shape, so that a request can be refused before torch is imported."""
    nodes = shape.nodes(gamma)
    if nodes > MAX_TREE_NODES:
        deepest = max((g for g in range(1, gamma) if shape.nodes(g) <= MAX_TREE_NODES), default=0)
        return (
            f"a token tree of depth gamma = {gamma} has {nodes} nodes, and one target forward scores at most "
            f"{MAX_TREE_NODES}: pick gamma {deepest} or less for a tree"
        )
    if min_confidence > 0:
        return "adaptive draft length (a confidence threshold) applies to chains only: set it to 0 for a tree"
    return None


@dataclass(frozen=True)
class DrafterInfo:
    name: str
    # a registered kind (`demo.models.drafter_kinds`): "text-only" / "image-aware", a drafter model
    # without or with the image; "prompt-lookup", no model; "self", the target with layers skipped; ...
    kind: DrafterKind
    params: int  # parameter count (prompt lookup: 0; self: the parameters of the layers it runs)
    min_confidence: float  # adaptive draft length: stop drafting below this top probability; 0 = off
    path: str = "transformers"  # what drafts: "transformers", "lean", "lean + NumPy step",
    # "lean + CUDA graphs", "n-gram lookup"
    tree: TreeShape | None = None  # the "+tree" option: the shape of each round's tree; None: chains


@dataclass(frozen=True)
class RunStart:
    """The first event of every run: what runs, so that the trace needs nothing beside it."""

    mode: Mode
    target: str  # the target's name
    target_params: int
    drafter: DrafterInfo | None  # None for autoregressive runs
    gamma: int  # the most drafts per round; 0 for autoregressive
    sampling: Sampling  # greedy or the warping (temperature, top-k, top-p) and the seed
    max_new_tokens: int  # the budget: answer tokens at most
    t: float = 0.0  # nothing computed yet
    target_path: str = "transformers"  # the target's decode forwards: Target.path ("lean", ...)


@dataclass(frozen=True)
class PrefillEvent:
    mode: Mode
    prompt_tokens: int  # target prompt length, image placeholders included
    drafter_prompt_tokens: int  # 0 for autoregressive runs
    target_seconds: float  # target forward over the prompt (image encoded here, once)
    drafter_seconds: float  # drafter forward over its own prompt; 0 for autoregressive
    t: float


@dataclass(frozen=True)
class Rejection:
    """The draft a target rejected, carried by the "resampled" token that replaced it."""

    id: int
    text: str
    p: float  # target probability of the rejected draft
    q: float  # draft probability
    accept_prob: float  # min(1, p/q) of that draft (greedy: 0.0)


REJECTION_FIELDS = tuple(Rejection.__dataclass_fields__)


@dataclass(frozen=True)
class TokenEvent:
    index: int  # position in the answer, 0-based
    token_id: int
    text: str  # incremental text piece; pieces concatenate to the decoded answer
    kind: TokenKind
    round: int  # 0 = prefill, then 1, 2, ... one per target forward in decoding
    p: float  # target probability of this token (warped as used for the decision)
    q: float | None = None  # draft probability, for accepted tokens
    accept_prob: float | None = None  # min(1, p/q) for accepted tokens (greedy: 1.0)
    rejection: Rejection | None = None  # for "resampled": the draft the target rejected
    t: float = 0.0

    def to_dict(self) -> dict:
        """The exported record: the rejection flattened into rejected_* fields (None when absent)."""
        rejected = asdict(self.rejection) if self.rejection else dict.fromkeys(REJECTION_FIELDS)
        record = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("rejection", "t")}
        return record | {f"rejected_{name}": value for name, value in rejected.items()} | {"t": self.t}


Ranked = tuple[tuple[str, float], ...]  # the k most likely tokens of a distribution: (text, probability)


@dataclass(frozen=True)
class Position:
    """One checked draft position of a round, for the inspector: the draft, both models'
    distributions there (their top k), and what decided."""

    draft: str  # the drafted token's text
    p: float  # target probability of the draft (warped as used for the decision)
    q: float  # drafter probability of the draft
    accept_prob: float  # min(1, p/q); greedy: 1.0 when the draft is the target's argmax, else 0.0
    u: float | None  # sampling: the uniform draw that decided (accepted when u < accept_prob); greedy: None
    accepted: bool
    top_p: Ranked  # the target's top k here
    top_q: Ranked  # the drafter's top k here


@dataclass(frozen=True)
class RoundDetail:
    """What the target saw in one round, for the inspector (top k only, never whole vocabularies)."""

    positions: tuple[Position, ...]  # the accepted drafts and the first rejected one; none after it
    token: str  # the target's own token: the resample at the rejection, or the bonus
    own: Ranked  # top k of the law it was drawn from: norm(max(0, p - q)) at a rejection, p after all drafts
    own_p: float  # the token's probability under that law


@dataclass(frozen=True)
class TreeNode:
    """One drafted token of a token tree (`DraftTree`)."""

    token_id: int
    text: str  # the token decoded on its own, for display
    parent: int  # index in DraftTree.nodes of the node it follows; -1: it follows the answer's last token
    depth: int  # 1 = the first draft position after the answer
    q: float  # drafter probability of this token after its parent
    accepted: bool  # on the accepted path


@dataclass(frozen=True)
class DraftTree:
    """A round's drafts as a tree (the "<drafter>+tree" option): the target scores every node in one
    forward, each attending to its ancestors only, and accepts one root-to-node path. The round's
    `drafted_ids` are the path the rule walked (the accepted nodes, then the first child rejected),
    so tau, alpha and the token kinds read as for a chain; `len(nodes)` is what the verify paid for."""

    nodes: tuple[TreeNode, ...]  # in the order the target saw them: parents before children
    path: tuple[int, ...]  # indices of the accepted nodes, depth 1 first (empty: none accepted)


@dataclass(frozen=True)
class RoundEvent:
    index: int  # 1, 2, ...: one per target forward in decoding
    drafted_ids: tuple[int, ...]  # what the drafter proposed (empty for autoregressive)
    drafted_texts: tuple[str, ...]  # each draft decoded on its own, for display
    n_accepted: int  # leading drafts the target accepted
    target_id: int  # the target's own token: the resample, or the bonus
    n_emitted: int  # tokens this round added to the answer (after any stop truncation)
    stop: Stop | None  # set when the run ends in this round
    draft_seconds: float
    verify_seconds: float
    t: float
    detail: RoundDetail | None = None  # speculative rounds: the distributions behind the decision
    # tree rounds only: every drafted node, and the accepted path (None for chain rounds, and for a
    # tree round that drafted nothing: the token budget's last token)
    tree: DraftTree | None = None
    # staged drafting only (`demo.engine.staged`): the drafter's own second stage this round, as
    # (tokens it guessed, tokens the drafter confirmed); None for every other drafter
    stages: tuple[int, int] | None = None

    def to_dict(self) -> dict:
        """The exported record: every field but the inspector's detail (a tree as nested dicts)."""
        record = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("detail", "tree")}
        record["tree"] = asdict(self.tree) if self.tree else None
        return record


@dataclass(frozen=True)
class RunSummary:
    mode: Mode
    token_ids: tuple[int, ...]
    text: str
    stop: Stop
    gamma: int  # 0 for autoregressive
    drafter: str | None  # drafter name, None for autoregressive
    target_params: int
    drafter_params: int  # 0 for autoregressive
    prefill_seconds: float  # target + drafter prefill
    decode_seconds: float  # everything after prefill
    target_forwards: int  # in decoding (prefill excluded)
    t: float


Event = RunStart | PrefillEvent | TokenEvent | RoundEvent | RunSummary


@dataclass
class Trace:
    """All events of one run, split by type. Built incrementally by consumers."""

    start: RunStart | None = None
    prefill: PrefillEvent | None = None
    tokens: list[TokenEvent] = field(default_factory=list)
    rounds: list[RoundEvent] = field(default_factory=list)
    summary: RunSummary | None = None
    t: float = 0.0  # compute seconds used so far: the latest event's clock
    # the target's attention on the image per answer token, read after the run (off its clock) by
    # demo.models.attention_pass; None until then, and for runs nobody asked it of
    image_attention: ImageAttention | None = None
    # its answer scored with the image and with a blank one (`demo.models.ablation.Ablation.to_dict()`),
    # read with the attention; None where nobody asked
    ablation: dict | None = None

    def add(self, event: Event) -> None:
        self.t = event.t
        if isinstance(event, TokenEvent):
            self.tokens.append(event)
        elif isinstance(event, RoundEvent):
            self.rounds.append(event)
        elif isinstance(event, PrefillEvent):
            self.prefill = event
        elif isinstance(event, RunStart):
            self.start = event
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

    @property
    def gamma(self) -> int:
        """The most drafts per round, from the first event; 0 before it or for autoregressive runs."""
        return self.start.gamma if self.start else 0

    @property
    def greedy(self) -> bool:
        """Whether the run decodes greedily, from the first event; True before it."""
        return self.start.sampling.greedy if self.start else True

    def to_dict(self) -> dict:
        """The exported trace. The run's description is the export's "settings", not repeated here.
        Each token's `image_attention` is the target's share of attention on the image there (None
        where it was not read); the trace's `image_attention` has the layers, grid and maps."""
        attention = self.image_attention
        return {
            "prefill": asdict(self.prefill) if self.prefill else None,
            "tokens": [{**t.to_dict(), "image_attention": self.image_share(t.index)} for t in self.tokens],
            "rounds": [r.to_dict() for r in self.rounds],
            "summary": asdict(self.summary) if self.summary else None,
            "image_attention": attention.to_dict() if attention else None,
        }

    def image_share(self, index: int) -> float | None:
        """The target's share of attention on the image at answer position `index`, if it was read."""
        return self.image_attention.share(index) if self.image_attention else None
