"""Token trees ("<drafter>+tree"): the drafter proposes a tree, the target scores it in one forward.

Shape (`TreeShape`, in `demo.engine.events`): k children per node at the first levels, then one
child per node down to depth gamma. The default, TREE_SHAPE = (2, 2), gives 2 nodes at depth 1,
4 at depth 2 and 4 chains below: 4 * gamma - 2 nodes from gamma 2 (gamma 1: 2 nodes). A tree of
more than MAX_TREE_NODES (32: gamma 8 at most), or with a confidence threshold, is refused
before any work (`events.tree_refusal`, also read by `Preset.refusal`).

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from demo.engine.decoding import Decoding, Target, emitted, ranked, round_events
from demo.engine.detokenize import piece_texts
from demo.engine.drafters import Drafter, DraftState, OnBase
from demo.engine.events import (
    TREE_SHAPE,
    DraftTree,
    Position,
    Rejection,
    RoundDetail,
    RoundEvent,
    TokenEvent,
    TreeNode,
    TreeShape,
)
from demo.engine.sampling import Sampling, sample, undefined_q, warp
from demo.engine.target_lm import visibility


class TreeDrafter(OnBase):
    """A model drafter drafting token trees: the same model and states, another round."""

    def __init__(self, base: Drafter, shape: TreeShape = TREE_SHAPE, *, name: str):
        super().__init__(base, name=name)
        self.tree = shape

    def start(self, inputs: dict) -> DraftState:
        return self.base.start(inputs)


@dataclass
class Tree:
    """A drafted tree, nodes in depth-first order (parents before children)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # -1: a child of the answer's last token
    depths: list[int] = field(default_factory=list)  # 1 = the first draft position
    children: dict[int, list[int]] = field(
        default_factory=dict
    )  # node (-1: the root) -> its children, in drafting order
    q: dict[int, torch.Tensor] = field(default_factory=dict)  # node -> q [V] its children were drawn from

    def add(self, token: int, parent: int, depth: int) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(depth)
        self.children.setdefault(parent, []).append(len(self.tokens) - 1)
        return len(self.tokens) - 1

    def q_of(self, node: int) -> float:
        """The drafter's probability of a node's token after its parent."""
        return float(self.q[self.parents[node]][self.tokens[node]])


@torch.inference_mode()
def draft_tree(
    state: DraftState,
    answer: list[int],
    gamma: int,
    shape: TreeShape,
    sampling: Sampling,
    generator: torch.Generator,
    features: torch.Tensor | None = None,
) -> Tree:
    """Draft a tree of depth gamma after `answer` (module docstring, step 1); `features` as
    `Drafting.propose` takes them. The state ends holding the answer only."""
    if features is not None:
        state.observe(features)
    tree, base, stop_ids = Tree(), len(answer), state.drafter.stop_ids
    if gamma == 0:
        return tree

    def grow(parent: int, logits: torch.Tensor, depth: int) -> None:
        # logits [V_d]: the drafter's after the path to `parent`; its children come from q there.
        q = state.q(logits, sampling)  # [V_d]
        k = shape.children(depth)
        if sampling.greedy:
            top = torch.topk(q, min(k, q.shape[-1]))  # read back as lists: a tensor iterated costs per item
            tokens = [t for p, t in zip(top.values.tolist(), top.indices.tolist()) if p > 0]
        else:
            tokens = sample(q.expand(k, -1), generator).tolist()  # k i.i.d. draws
        tree.q[parent] = state.widen([q])[0]  # [V]
        for token in tokens:
            node = tree.add(token, parent, depth)
            if depth < gamma and token not in stop_ids:
                grow(node, state.extend(token, base + depth - 1), depth + 1)
                state.rollback(base + depth - 1)  # forget this node (and what grew below it)

    try:
        grow(-1, state.catch_up(answer), 1)
    finally:  # `grow` calls itself, so it sits in its own closure: a reference cycle that would hold
        grow = None  # the state and its KV cache until Python's rare full collection (docs/soak.md)
    return tree


def keep_path(cache, start: int, path: list[int], n_nodes: int) -> None:
    """Keep, after the first `start` cached tokens, only the nodes on `path` (indices among the
    n_nodes that follow them), in order. Moves the accepted nodes' keys and values, then crops."""
    if path != list(range(len(path))):  # already in place when the path is the first nodes
        for layer in cache.layers:
            if not layer.is_initialized:  # a layer transformers has not written yet
                continue
            index = torch.tensor([start + i for i in path], device=layer.keys.device)
            end = start + len(path)
            layer.keys[..., start:end, :] = layer.keys.index_select(-2, index)
            layer.values[..., start:end, :] = layer.values.index_select(-2, index)
    if n_nodes > len(path):
        cache.crop(-(n_nodes - len(path)))  # crop(-k) removes the last k cached tokens


def residual(r: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, r - q)) [V] for r, q [V]: what the next child is judged against after one is rejected. All zero
    only where r == q, and then no child is ever rejected; r is kept there against round-off."""
    rest = (r - q).clamp_min(0.0)
    return rest / rest.sum() if rest.sum() > 0 else r


@dataclass(frozen=True)
class TreeVerdict:
    """The walk's outcome (module docstring, step 2)."""

    path: list[int]  # accepted nodes, depth 1 first
    rejected: int | None  # the first child rejected where the walk stopped; None at a leaf
    token: int  # the target's own token
    law: torch.Tensor  # [V] what it was drawn from (greedy: p there, for display)
    p: torch.Tensor  # [n + 1, V] the target's warped distributions: row 0 the root, row i + 1 node i
    accept: dict[int, float]  # node -> the acceptance probability the rule gave it (greedy: 1 or 0)
    u: dict[int, float]  # sampling: node -> the uniform draw that decided it
    hidden: torch.Tensor | None = None  # [n + 1, C] the target's features, for a feature drafter


def verify_tree(
    target: Target,
    cache,
    last: int,
    tree: Tree,
    sampling: Sampling,
    generator: torch.Generator,
    features: bool = False,
) -> TreeVerdict:
    """One target forward over [last] + the tree's n nodes (logits [n + 1, V]), then the walk from
    the root. With `features` the verdict keeps that forward's last hidden states [n + 1, C]."""
    depths = [0] + tree.depths
    out = target.forward_tree([last] + tree.tokens, depths, visibility(tree.parents), cache, features)
    logits, hidden = out if features else (out, None)  # [n + 1, V], [n + 1, C]
    verdict = _walk(tree, logits, sampling, generator)
    return TreeVerdict(*verdict, hidden=hidden)


def _walk(tree: Tree, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> tuple:
    """The walk from the root over the target's logits [n + 1, V]: TreeVerdict's fields."""
    p = warp(logits, sampling)  # [n + 1, V]
    node, path, accept, us = -1, [], {}, {}
    while True:
        kids = tree.children.get(node, [])
        p_here = p[node + 1]  # [V]
        if sampling.greedy:
            choice = int(logits[node + 1].argmax())
            match = next((c for c in kids if tree.tokens[c] == choice), None)
            accept |= {c: float(c == match) for c in kids[: kids.index(match) + 1 if match is not None else 1]}
            if match is None:
                return path, kids[0] if kids else None, choice, p_here, p, accept, us
            path.append(match)
            node = match
            continue
        if not kids:  # a leaf: the bonus, from p
            return path, None, int(sample(p_here, generator)), p_here, p, accept, us
        q, r, match = tree.q[node], p_here, None
        for c in kids:
            x = tree.tokens[c]
            if not float(q[x]) > 0:  # p/q undefined: no rule keeps the law (sampling.acceptance_probs)
                raise ValueError(undefined_q(x))
            accept[c] = min(1.0, float(r[x]) / float(q[x]))
            us[c] = float(torch.rand((), generator=generator, device=p.device))
            if us[c] < accept[c]:
                match = c
                break
            r = residual(r, q)
        if match is None:
            return path, kids[0], int(sample(r, generator)), r, p, accept, us
        path.append(match)
        node = match


def walked(tree: Tree, v: TreeVerdict) -> list[int]:
    """The nodes the round reports as its drafts: the accepted path, then the first rejected child."""
    return v.path + ([v.rejected] if v.rejected is not None else [])


def tree_event(tree: Tree, v: TreeVerdict, tokenizer) -> DraftTree:
    on_path = set(v.path)
    nodes = tuple(
        TreeNode(
            token_id=token,
            text=tokenizer.decode([token]),
            parent=tree.parents[i],
            depth=tree.depths[i],
            q=tree.q_of(i),
            accepted=i in on_path,
        )
        for i, token in enumerate(tree.tokens)
    )
    return DraftTree(nodes=nodes, path=tuple(v.path))


def tree_detail(tree: Tree, v: TreeVerdict, tokenizer) -> RoundDetail:
    """The inspector's view of a tree round: each walked node with p and q where it was judged."""
    positions = tuple(
        Position(
            draft=tokenizer.decode([tree.tokens[i]]),
            p=float(v.p[tree.parents[i] + 1, tree.tokens[i]]),
            q=tree.q_of(i),
            accept_prob=v.accept[i],
            u=v.u.get(i),
            accepted=i in v.path,
            top_p=ranked(v.p[tree.parents[i] + 1], tokenizer),
            top_q=ranked(tree.q[tree.parents[i]], tokenizer),
        )
        for i in walked(tree, v)
    )
    own = ranked(v.law, tokenizer)
    return RoundDetail(positions=positions, token=tokenizer.decode([v.token]), own=own, own_p=float(v.law[v.token]))


def _token_fields(j: int, tree: Tree, v: TreeVerdict, tokenizer) -> dict:
    """Kind and probabilities of the j-th token a tree round emits (the path's tokens, then v.token)."""
    if j < len(v.path):
        node = v.path[j]
        return dict(
            kind="accepted",
            p=float(v.p[tree.parents[node] + 1, tree.tokens[node]]),
            q=tree.q_of(node),
            accept_prob=v.accept[node],
        )
    p_token = float(v.p[(v.path[-1] if v.path else -1) + 1, v.token])
    if v.rejected is not None:
        x = tree.tokens[v.rejected]
        rejection = Rejection(
            id=x,
            text=tokenizer.decode([x]),
            p=float(v.p[tree.parents[v.rejected] + 1, x]),
            q=tree.q_of(v.rejected),
            accept_prob=v.accept[v.rejected],
        )
        return dict(kind="resampled", p=p_token, rejection=rejection)
    return dict(kind="bonus" if tree.tokens else "target", p=p_token)


@torch.inference_mode()
def tree_round(state: Decoding, drafting: DraftState, index: int) -> tuple[list[TokenEvent], RoundEvent]:
    """One round with a token tree: draft, verify, roll back, emit (as `speculative_round` for
    chains). Returns the round's token events and its round event."""
    target, start, clock, answer = state.target, state.start, state.clock, state.answer
    # 1. draft a tree of depth gamma at most: never deeper than the token budget can take.
    with clock:
        depth = min(start.gamma, start.max_new_tokens - len(answer) - 1)
        tree = draft_tree(drafting, answer, depth, start.drafter.tree, start.sampling, state.generator, state.features)
    draft_s = clock.last  # n nodes

    # 2. verify the whole tree in one target forward, and walk it from the root.
    with clock:
        v = verify_tree(target, state.cache, answer[-1], tree, start.sampling, state.generator, state.reads_features)
    verify_s = clock.last

    with clock:
        # 3. roll back: the target cache holds prompt + answer + the n nodes; keep the accepted
        #    path's only (the round's last token is fed by the next forward). The drafter holds
        #    the answer: the path reaches it next round.
        n = len(tree.tokens)
        keep_path(state.cache, state.cache.get_seq_length() - n, v.path, n)
        if state.reads_features:  # the hidden states of the last token and the accepted path, for the next round
            state.features = v.hidden[[0] + [i + 1 for i in v.path]]
        # 4. emit the accepted path and the target's token, cut after the first stop.
        path = [tree.tokens[i] for i in v.path]
        tokens = emitted(state, path + [v.token], index, lambda j: _token_fields(j, tree, v, target.tokenizer))
        drafts = [tree.tokens[i] for i in walked(tree, v)]
    detail = tree_detail(tree, v, target.tokenizer)  # off the clock: display only
    texts = piece_texts(target.tokenizer, drafts)  # whole characters, as in speculative_round
    shape = tree_event(tree, v, target.tokenizer) if n else None
    return round_events(
        state, index, drafts, texts, len(v.path), v.token, tokens, (draft_s, verify_s), detail=detail, tree=shape
    )
