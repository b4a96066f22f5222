"""Verification: the target's decision on one round's drafts, and how the events read it.

One speculative round (`demo.engine.speculative.speculative_round`) drafts on the device, then
calls `verify`: one target forward over [last token] + drafts gives p at every draft position and
one past, the drafts are cut after the first stop, and the rule in `demo.engine.sampling`
(`verify_greedy`, `verify_sampled`) accepts a prefix of them and adds the target's own token. All
of it stays on the device and comes back packed in one float64 vector, so the round reads it in
one transfer.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from demo.engine.decoding import INSPECT_TOP_K, Target
from demo.engine.events import Position, Rejection, RoundDetail
from demo.engine.sampling import Sampling, acceptance_probs, undefined_q, verify_greedy, verify_sampled, warp


@dataclass(frozen=True)
class Verdict:
    """The target's decision on one round's drafts, as the round's one transfer brought it back."""

    n_drafts: int  # drafts that count: cut after the first stop (the drafter drafted on past it)
    n_accepted: int  # leading drafts accepted
    token: int  # the target's own token: the resample at the first rejection, or the bonus
    p_token: float  # p of that token
    p_drafts: list[float]  # p of each draft at its position
    q_drafts: list[float]  # q of each draft
    accept_probs: list[float]  # min(1, p/q) per draft; greedy: 1.0 if it matched the argmax, else 0.0
    u: list[float | None]  # sampling: the uniform draw that decided each draft; greedy: None
    top_p: list[tuple[list[float], list[int]]]  # the inspector's top k of p at each position, 0..n
    top_q: list[tuple[list[float], list[int]]]  # and of q at each draft
    own: tuple[list[float], list[int]]  # top k of the law the target's token was drawn from
    own_p: float  # that law's probability of the token

    @classmethod
    def read(cls, record: list[float], n: int, k: int, greedy: bool) -> Verdict:
        """Unpack `verify`'s record of n drafts and top-k lists of k."""
        head, at = record[:5], 5

        def take(m: int) -> list[float]:
            nonlocal at
            at += m
            return record[at - m : at]

        def tops(rows: int) -> list[tuple[list[float], list[int]]]:
            values, ids = take(rows * k), take(rows * k)
            return [(values[r * k : (r + 1) * k], [int(i) for i in ids[r * k : (r + 1) * k]]) for r in range(rows)]

        ids, p_drafts, q_drafts, accept, u = (take(n) for _ in range(5))
        undefined = [int(x) for x, a in zip(ids[: int(head[0])], accept, strict=False) if math.isnan(a)]
        if undefined and not greedy:  # a draft with q(x) = 0 (`sampling.acceptance_probs`)
            raise ValueError(undefined_q(undefined[0]))
        top_p, top_q, own = tops(n + 1), tops(n), tops(1)[0]
        return cls(
            n_drafts=int(head[0]),
            n_accepted=int(head[1]),
            token=int(head[2]),
            p_token=head[3],
            p_drafts=p_drafts,
            q_drafts=q_drafts,
            accept_probs=accept,
            u=[None] * n if greedy else u,
            top_p=top_p,
            top_q=top_q,
            own=own,
            own_p=head[4],
        )


def verify(
    target: Target,
    cache,
    last: torch.Tensor,
    drafts: torch.Tensor,
    q: torch.Tensor,
    sampling: Sampling,
    generator: torch.Generator,
    stop_ids: torch.Tensor,
    features: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One target forward over [last] + drafts, then the stop cut and the acceptance rule, all on
    the device; returns the round's record, packed in one float64 vector for one transfer (ids are
    exact in float64): [n_drafts, n_accepted, token, p(token), law(token)], then per draft its id,
    p, q, acceptance probability and u, then the inspector's top k of p (n + 1 rows), of q (n rows)
    and of the token's law (`Verdict.read` unpacks it).

    last [1] and drafts [n] long; q [n, V]; stop_ids [s] long: the target's stop ids. Returns the
    record and, with `features`, the same forward's last hidden states [n+1, C] (else None), left
    on the device for a feature drafter (`LoadedDrafter.reads_features`).
    """
    n = drafts.shape[0]
    out = target.forward(torch.cat([last, drafts]), cache, features)
    logits, hidden = out if features else (out, None)  # [n+1, V], [n+1, C]
    p = warp(logits, sampling)  # [n+1, V]
    # The drafts count up to the first stop: a model drafter drafts on past it (`Drafting.propose`).
    is_stop = torch.isin(drafts, stop_ids)  # [n]
    none = torch.zeros((), dtype=torch.long, device=p.device)
    n_drafts = torch.where(is_stop.any(), is_stop.int().argmax() + 1, n) if n else none  # []
    if sampling.greedy:
        n_acc, token = verify_greedy(logits, drafts, n_drafts)  # [], []
        accept = (logits[:n].argmax(-1) == drafts).double()  # [n]
        u = torch.full((n,), math.nan, device=p.device)
        law = p.index_select(0, n_acc.reshape(1))[0]  # [V]: p there, for display
    else:
        rng_before = generator.get_state()  # read only: u is redrawn below from a copy, for the inspector
        n_acc, token = verify_sampled(p, q, drafts, generator)  # [], []
        # A stop draft that was accepted ends the run there: count no draft past it, and show the
        # target's argmax after it (never emitted, since the run stops at the stop).
        past = (n_acc >= n_drafts) & (n_drafts < n)
        n_acc = torch.where(past, n_drafts, n_acc)
        token = torch.where(past, p.index_select(0, n_drafts.reshape(1))[0].argmax(), token)
        copy = torch.Generator(device=p.device)
        copy.set_state(rng_before)
        u = torch.rand(n, generator=copy, device=p.device)  # [n]: the draws verify_sampled made
        p_k = p.index_select(0, n_acc.reshape(1))[0]  # [V]
        q_k = q.index_select(0, n_acc.clamp(max=max(n - 1, 0)).reshape(1))[0] if n else torch.zeros_like(p_k)
        rest = (p_k - q_k).clamp_min(0.0)  # the residual the resample was drawn from, at a rejection
        rejected = (n_acc < n_drafts) & (rest.sum() > 0)
        law = torch.where(rejected, rest / rest.sum().clamp_min(1e-30), p_k)  # [V]
        accept = acceptance_probs(p, q, drafts)  # [n]
    k = min(INSPECT_TOP_K, p.shape[-1])
    top_p, top_q, top_law = p.topk(k), q.topk(k), law.topk(k)  # values and ids [rows, k]
    token = token.reshape(1)
    head = [
        n_drafts.reshape(1),
        n_acc.reshape(1),
        token,
        p.index_select(0, n_acc.reshape(1))[0].gather(0, token),
        law.gather(0, token),
    ]
    per_draft = [
        drafts,
        p[:n].gather(-1, drafts[:, None])[:, 0],
        q.gather(-1, drafts[:, None])[:, 0],
        accept,
        u,
    ]
    tops = [top_p.values, top_p.indices, top_q.values, top_q.indices, top_law.values, top_law.indices]
    return torch.cat([t.double().reshape(-1) for t in head + per_draft + tops]), hidden


def _ranked(top: tuple[list[float], list[int]], tokenizer) -> tuple[tuple[str, float], ...]:
    """A top-k list (probabilities, ids) as the inspector shows it: (text, probability), nonzero only."""
    return tuple((tokenizer.decode([i]), pr) for pr, i in zip(*top, strict=True) if pr > 0)


def round_detail(drafts: list[int], texts: tuple[str, ...], v: Verdict, tokenizer) -> RoundDetail:
    """The inspector's view of a round from what verification brought back (no model call, no
    transfer): each checked draft's text, p and q's top k there, u, and the law of the target's token."""
    n_checked = min(v.n_accepted + 1, len(drafts))
    positions = tuple(
        Position(
            draft=texts[i],
            p=v.p_drafts[i],
            q=v.q_drafts[i],
            accept_prob=v.accept_probs[i],
            u=v.u[i],
            accepted=i < v.n_accepted,
            top_p=_ranked(v.top_p[i], tokenizer),
            top_q=_ranked(v.top_q[i], tokenizer),
        )
        for i in range(n_checked)
    )
    return RoundDetail(
        positions=positions, token=tokenizer.decode([v.token]), own=_ranked(v.own, tokenizer), own_p=v.own_p
    )


def token_fields(j: int, drafts: list[int], texts: tuple[str, ...], v: Verdict) -> dict:
    """Kind and probabilities of the j-th token a round emits (drafts[:n_accepted] + [v.token]);
    a rejected draft's text is its share of the drafts' whole characters (`texts`)."""
    if j < v.n_accepted:
        return dict(kind="accepted", p=v.p_drafts[j], q=v.q_drafts[j], accept_prob=v.accept_probs[j])
    if v.n_accepted < len(drafts):
        k = v.n_accepted
        rejection = Rejection(
            id=drafts[k],
            text=texts[k],
            p=v.p_drafts[k],
            q=v.q_drafts[k],
            accept_prob=v.accept_probs[k],
        )
        return dict(kind="resampled", p=v.p_token, rejection=rejection)
    return dict(kind="bonus" if drafts else "target", p=v.p_token)
