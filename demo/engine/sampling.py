"""Warping and the speculative acceptance rule: pure functions of logits and probabilities.

Names follow the speculative sampling papers (Leviathan et al. 2023, Chen et al. 2023):
`p` is the target's distribution, `q` the drafter's, `gamma` the number of drafted tokens.

Greedy verification accepts a draft exactly when it is the target's argmax. Sampling
verification accepts draft x with probability min(1, p(x) / q(x)); at the first rejection it
samples from the residual norm(max(0, p - q)); when every draft was accepted it samples a bonus
token from p at the position after the last draft. The output is then distributed exactly as p,
whatever q is. Temperature, top-k and top-p warp p and q identically, before either is used.
More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    greedy: bool = True  # argmax decoding; the warping fields below are then unused
    temperature: float = 1.0  # > 0; divides the logits
    top_k: int = 0  # keep the k most likely tokens; 0 keeps all
    top_p: float = 1.0  # keep the smallest set whose probability reaches top_p; 1.0 keeps all
    seed: int = 0  # seeds the run's torch.Generator


def warp(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Logits [..., V] -> probabilities [..., V] as used for decisions (greedy: the softmax at
    temperature 1, only to report how confident each model was; decisions use the argmax)."""
    logits = logits.float()
    if sampling.greedy:
        return torch.softmax(logits, dim=-1)
    logits = logits / sampling.temperature
    if 0 < sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens ranked above it already reach top_p; the first always stays.
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop_sorted = mass_before >= sampling.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row of probs [..., V] -> ids [...].

    argmax(probs / E), E ~ Exponential(1) per entry: the draw `torch.multinomial(probs, 1)` makes
    (its one-sample path, the same generator calls, so the same ids), without the validity check
    that reads a value back to the host and so synchronises a GPU at every draw.
    """
    noise = torch.empty_like(probs).exponential_(1, generator=generator)  # [..., V]
    return (probs / noise).argmax(dim=-1)


def _leading(ok: torch.Tensor, n_drafts: torch.Tensor | None) -> torch.Tensor:
    """Length of the leading run of True in ok [..., gamma], counting only the first n_drafts [...]."""
    if n_drafts is not None:  # drafts past n_drafts (after a stop) are never accepted
        ok = ok & (torch.arange(ok.shape[-1], device=ok.device) < n_drafts[..., None])
    return ok.long().cumprod(dim=-1).sum(dim=-1)


def verify_greedy(
    target_logits: torch.Tensor, drafts: torch.Tensor, n_drafts: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verification: target_logits [..., gamma+1, V] at each draft position and one past,
    drafts [..., gamma], n_drafts [...] how many count (the rest drafted past a stop) ->
    (n_accepted [...], next_token [...]): the leading drafts equal to the target's argmax, and the
    argmax right after them (the correction at the first mismatch, or the bonus when all matched)."""
    choice = target_logits.argmax(dim=-1)  # [..., gamma+1]
    gamma = drafts.shape[-1]
    n_accepted = _leading(choice[..., :gamma] == drafts, n_drafts)  # [...]
    next_token = choice.gather(-1, n_accepted.unsqueeze(-1)).squeeze(-1)
    return n_accepted, next_token


def undefined_q(token: int) -> str:
    """The sentence a run stops with when a draft had q(x) = 0."""
    return (
        f"the drafter proposed token {token} with q(x) = 0: it was not drawn from the q it reported, "
        "so p(x)/q(x) is undefined and no acceptance rule keeps the target's law"
    )


def acceptance_probs(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) for each draft x. p [..., >=gamma, V], q [..., gamma, V] -> [..., gamma].

    NaN where q(x) = 0: a draft cannot have been drawn from a q that gives it no mass, and no rule
    keeps the law then (accepting it skews the output; dividing by it fails). `verify_sampled`
    rejects such a draft (u < NaN is false), and the round fails loudly once it reads the NaN back
    with its one transfer (`verification.Verdict.read`): nothing here reads a value on the host."""
    gamma = drafts.shape[-1]
    index = drafts.unsqueeze(-1)
    p_x = p[..., :gamma, :].gather(-1, index).squeeze(-1)
    q_x = q.gather(-1, index).squeeze(-1)
    return torch.where(q_x > 0, (p_x / q_x.clamp_min(1e-30)).clamp(max=1.0), torch.full_like(p_x, float("nan")))


def verify_sampled(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rejection-sampling verification (Leviathan et al. 2023, Algorithm 1): p [..., gamma+1, V]
    the target's at each draft position and one past, q [..., gamma, V] the drafter's the drafts
    [..., gamma] were sampled from -> (n_accepted [...], next_token [...])."""
    gamma = drafts.shape[-1]
    # 1. accept draft i with probability min(1, p_i(x_i) / q_i(x_i)); keep the leading run.
    u = torch.rand(drafts.shape, generator=generator, device=p.device)  # [..., gamma]
    n_accepted = _leading(u < acceptance_probs(p, q, drafts), None)  # [...]
    # 2. the distribution of the next token: the residual at the first rejection, or p itself
    #    one past the last draft when all were accepted (the bonus).
    residual = (p[..., :gamma, :] - q).clamp_min(0.0)  # [..., gamma, V]
    candidates = torch.cat([residual, p[..., gamma:, :]], dim=-2)  # [..., gamma+1, V]
    index = n_accepted[..., None, None].expand(*n_accepted.shape, 1, p.shape[-1])
    dist = candidates.gather(-2, index).squeeze(-2)  # [..., V]
    # A residual is all zero only where p == q, and then that position rejects with
    # probability 0; fall back to p so a float round-off cannot produce an empty distribution.
    p_at = p.gather(-2, index).squeeze(-2)
    empty = dist.sum(dim=-1, keepdim=True) <= 0
    dist = torch.where(empty, p_at, dist)
    next_token = sample(dist / dist.sum(dim=-1, keepdim=True), generator)
    return n_accepted, next_token
