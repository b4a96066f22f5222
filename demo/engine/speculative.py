"""Speculative and autoregressive decoding of a multimodal target, as streams of typed events.

Notation (Leviathan et al. 2023; Gagrani et al. 2024 for the multimodal setting):
    p      the target's next-token distribution (the multimodal model that sees the image)
    q      the drafter's next-token distribution
    gamma  how many tokens the drafter proposes per round
    tau    block efficiency: answer tokens per target forward in decoding, bonus included

A run is one prefill (`_prefill`, shared by both generators) and then rounds. A speculative
round (`speculative_round`): (1) the drafter proposes up to gamma tokens; (2) one target
forward over [last token] + drafts gives p at every draft position and one past, and the rule
in `demo.engine.sampling` accepts a prefix of the drafts and adds one token of the target's own (a
resample at the first rejection, or a bonus when all were accepted); (3) both KV caches forget
the rejected drafts; (4) the round's tokens are emitted, cut after a stop. The image is encoded
once, at prefill; later forwards carry only token ids. A drafter may propose nothing in a round
(prompt lookup without a match, or the token budget's last token): that round is one target step.
A tree drafter's rounds are `demo.engine.trees.tree_round`, the same four steps over a token tree.

    speculative_generate / autoregressive_generate   the runs, as event generators
    run(...) -> Trace                                 one whole run, for the benchmark and checks

Cache invariant for the target, at the top of every round:
    cache = prompt + answer[:-1]       (the last answer token is fed by the next forward)

Both generators measure their own compute time and stop the clock while the consumer holds
them, so `event.t` is the time the run itself used. Nothing here knows about Gradio or plotly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from demo.engine import trees
from demo.engine.decoding import Decoding, Prompt, Stopwatch, Target, ranked
from demo.engine.detokenize import Detokenizer
from demo.engine.drafters import Drafter, DraftState
from demo.engine.events import (
    DrafterInfo,
    Event,
    Position,
    PrefillEvent,
    Rejection,
    RoundDetail,
    RoundEvent,
    RunStart,
    RunSummary,
    TokenEvent,
    Trace,
    tree_refusal,
)
from demo.engine.sampling import Sampling, acceptance_probs, sample, verify_greedy, verify_sampled, warp


def _first_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> tuple[int, float]:
    p = warp(logits, sampling)
    token = int(logits.argmax()) if sampling.greedy else int(sample(p, generator))
    return token, float(p[token])


def run_start(
    target: Target,
    drafter: Drafter | None,
    *,
    gamma: int,
    sampling: Sampling,
    max_new_tokens: int,
    min_confidence: float = 0.0,
) -> RunStart:
    """The first event of a run: what runs, with what settings."""
    info = None
    if drafter is not None:
        info = DrafterInfo(
            name=drafter.name,
            kind=drafter.kind,
            params=drafter.n_params,
            min_confidence=min_confidence,
            path=drafter.path,
            tree=drafter.tree,
        )
    return RunStart(
        mode="speculative" if drafter is not None else "autoregressive",
        target=target.name,
        target_params=target.n_params,
        drafter=info,
        gamma=gamma if drafter is not None else 0,
        sampling=sampling,
        max_new_tokens=max_new_tokens,
        target_path=target.path,
    )


@torch.inference_mode()
def _prefill(
    target: Target, prompt: Prompt, start: RunStart, generator: torch.Generator, drafter: Drafter | None
) -> tuple[Decoding, DraftState | None, PrefillEvent, TokenEvent]:
    """0. prefill: the target encodes image + prompt and gives the first token on its own; the
    drafter, if any, reads its own prompt (text only, or with the image) into a new state."""
    state = Decoding(
        target, start, generator, Stopwatch(target.device), target.new_cache(), Detokenizer(target.tokenizer), []
    )
    clock = state.clock
    with clock:
        logits = target.prefill(prompt.target_inputs, state.cache)
        first, p_first = _first_token(logits, start.sampling, generator)
    target_s = clock.last
    drafting, drafter_s = None, 0.0
    if drafter is not None:
        with clock:
            drafting = drafter.start(prompt.drafter_inputs)
        drafter_s = clock.last
    prefill = PrefillEvent(
        mode=start.mode,
        prompt_tokens=prompt.target_inputs["input_ids"].shape[1],
        drafter_prompt_tokens=prompt.drafter_inputs["input_ids"].shape[1] if drafter is not None else 0,
        target_seconds=target_s,
        drafter_seconds=drafter_s,
        t=clock.total,
    )
    with clock:
        text = state.append(first)
    token = TokenEvent(index=0, token_id=first, text=text, kind="target", round=0, p=p_first, t=clock.total)
    return state, drafting, prefill, token


@dataclass(frozen=True)
class Verdict:
    """The target's decision on one round's drafts."""

    n_accepted: int  # leading drafts accepted
    token: int  # the target's own token: the resample at the first rejection, or the bonus
    p_token: float  # p of that token
    p_drafts: list[float]  # p of each draft at its position
    q_drafts: list[float]  # q of each draft
    accept_probs: list[float]  # min(1, p/q) per draft; greedy: 1.0 if it matched the argmax, else 0.0
    p: torch.Tensor | None = None  # [n+1, V]: the warped target distributions, for the inspector
    rng_before: torch.Tensor | None = None  # sampling: the generator's state before the draws of u


def verify(
    target: Target, cache, last: int, drafts: list[int], q: torch.Tensor, sampling: Sampling, generator: torch.Generator
) -> Verdict:
    """One target forward over [last] + drafts, then the acceptance rule. q: [len(drafts), V]."""
    logits = target.forward([last] + drafts, cache)  # [n+1, V]
    p = warp(logits, sampling)  # [n+1, V]
    ids = torch.tensor(drafts, dtype=torch.long, device=p.device)  # [n]
    rng_before = None
    if sampling.greedy:
        n_acc, token = verify_greedy(logits, ids)
        accept = (logits[: len(drafts)].argmax(-1) == ids).float()
    else:
        rng_before = generator.get_state()  # read only: the inspector redraws u from a copy
        n_acc, token = verify_sampled(p, q, ids, generator)
        accept = acceptance_probs(p, q, ids)
    n_acc, token = int(n_acc), int(token)
    return Verdict(
        n_accepted=n_acc,
        token=token,
        p_token=float(p[n_acc, token]),
        p_drafts=p[: len(drafts)].gather(-1, ids[:, None]).squeeze(-1).tolist(),
        q_drafts=q.gather(-1, ids[:, None]).squeeze(-1).tolist(),
        accept_probs=accept.tolist(),
        p=p,
        rng_before=rng_before,
    )


def round_detail(drafts: list[int], q: torch.Tensor, v: Verdict, sampling: Sampling, tokenizer) -> RoundDetail:
    """The inspector's view of a round, from what verification already computed (no model call):
    the top k of p and q at each checked draft, the uniform draws u (redrawn from a copy of the
    generator's state, so the run's own draws are untouched), and the law of the target's token."""
    n_checked = min(v.n_accepted + 1, len(drafts))
    u = [None] * len(drafts)
    if v.rng_before is not None and drafts:
        copy = torch.Generator(device=v.p.device)
        copy.set_state(v.rng_before)
        u = torch.rand(len(drafts), generator=copy, device=v.p.device).tolist()  # as verify_sampled drew them
    positions = tuple(
        Position(
            draft=tokenizer.decode([drafts[i]]),
            p=v.p_drafts[i],
            q=v.q_drafts[i],
            accept_prob=v.accept_probs[i],
            u=u[i],
            accepted=i < v.n_accepted,
            top_p=ranked(v.p[i], tokenizer),
            top_q=ranked(q[i], tokenizer),
        )
        for i in range(n_checked)
    )
    k = v.n_accepted
    law = v.p[k]
    if k < len(drafts) and not sampling.greedy:  # the residual the resample was drawn from
        residual = (v.p[k] - q[k]).clamp_min(0.0)
        law = residual / residual.sum() if residual.sum() > 0 else v.p[k]
    own = ranked(law, tokenizer)
    return RoundDetail(positions=positions, token=tokenizer.decode([v.token]), own=own, own_p=float(law[v.token]))


def _token_fields(j: int, drafts: list[int], v: Verdict, tokenizer) -> dict:
    """Kind and probabilities of the j-th token a round emits (drafts[:n_accepted] + [v.token])."""
    if j < v.n_accepted:
        return dict(kind="accepted", p=v.p_drafts[j], q=v.q_drafts[j], accept_prob=v.accept_probs[j])
    if v.n_accepted < len(drafts):
        k = v.n_accepted
        rejection = Rejection(
            id=drafts[k],
            text=tokenizer.decode([drafts[k]]),
            p=v.p_drafts[k],
            q=v.q_drafts[k],
            accept_prob=v.accept_probs[k],
        )
        return dict(kind="resampled", p=v.p_token, rejection=rejection)
    return dict(kind="bonus" if drafts else "target", p=v.p_token)


@torch.inference_mode()
def speculative_round(state: Decoding, drafting: DraftState, index: int) -> tuple[list[TokenEvent], RoundEvent]:
    """One round of speculative decoding: draft, verify, roll back, emit. Returns the round's
    token events and its round event, all stamped with the run's clock at the round's end."""
    target, start, clock, answer = state.target, state.start, state.clock, state.answer
    # 1. draft: never more than the token budget can take (the round adds one token more).
    with clock:
        n_draft = min(start.gamma, start.max_new_tokens - len(answer) - 1)
        drafts, q = drafting.draft(answer, n_draft, start.sampling, state.generator, start.drafter.min_confidence)
    draft_s = clock.last  # q: [len(drafts), V]

    # 2. verify all drafts in one target forward, accept a prefix, add the target's token.
    with clock:
        v = verify(target, state.cache, answer[-1], drafts, q, start.sampling, state.generator)
    verify_s = clock.last

    with clock:
        # 3. roll back: the target cache holds prompt + answer + every draft; drop the rejected
        #    ones (the round's last token is fed by the next round's forward). The drafter keeps
        #    what it holds of the answer's first len(answer) + n_accepted tokens.
        if len(drafts) > v.n_accepted:
            state.cache.crop(-(len(drafts) - v.n_accepted))
        drafting.rollback(len(answer) + v.n_accepted)
        # 4. emit the accepted drafts and the target's token, cut after the first stop.
        tokens = []
        for j, token in enumerate(drafts[: v.n_accepted] + [v.token]):
            text = state.append(token)
            tokens.append(
                dict(
                    _token_fields(j, drafts, v, target.tokenizer),
                    index=len(answer) - 1,
                    token_id=token,
                    text=text,
                    round=index,
                )
            )
            if state.stop:
                break
        drafted_texts = tuple(target.tokenizer.decode([d]) for d in drafts)
    detail = round_detail(drafts, q, v, start.sampling, target.tokenizer)  # off the clock: display only
    events = [TokenEvent(**fields, t=clock.total) for fields in tokens]
    return events, RoundEvent(
        index=index,
        drafted_ids=tuple(drafts),
        drafted_texts=drafted_texts,
        n_accepted=v.n_accepted,
        target_id=v.token,
        n_emitted=len(tokens),
        stop=state.stop,
        draft_seconds=draft_s,
        verify_seconds=verify_s,
        t=clock.total,
        detail=detail,
    )


def _summary(state: Decoding, prefill: PrefillEvent, n_rounds: int) -> RunSummary:
    start = state.start
    return RunSummary(
        mode=start.mode,
        token_ids=tuple(state.answer),
        text=state.detok.text,
        stop=state.stop,
        gamma=start.gamma,
        drafter=start.drafter.name if start.drafter else None,
        target_params=start.target_params,
        drafter_params=start.drafter.params if start.drafter else 0,
        prefill_seconds=prefill.t,
        decode_seconds=state.clock.total - prefill.t,
        target_forwards=n_rounds,
        t=state.clock.total,
    )


@torch.inference_mode()
def speculative_generate(
    target: Target,
    drafter: Drafter,
    prompt: Prompt,
    *,
    gamma: int,
    sampling: Sampling,
    max_new_tokens: int,
    generator: torch.Generator,
    min_confidence: float = 0.0,
) -> Iterator[Event]:
    """Speculative decoding of `target`, drafting with `drafter`; yields the run's events.

    gamma is the most drafts per round. With min_confidence > 0 the draft length adapts: the
    drafter stops early where its top probability falls below it (see `DraftState.draft`).
    """
    assert gamma >= 1 and max_new_tokens >= 1
    if drafter.tree is not None and (why := tree_refusal(drafter.tree, gamma, min_confidence)):
        raise ValueError(f"This tree cannot run: {why}.")
    start = run_start(
        target, drafter, gamma=gamma, sampling=sampling, max_new_tokens=max_new_tokens, min_confidence=min_confidence
    )
    yield start
    state, drafting, prefill, first = _prefill(target, prompt, start, generator, drafter)
    yield prefill
    yield first
    play = trees.tree_round if drafter.tree is not None else speculative_round
    n_round = 0
    while state.stop is None:
        n_round += 1
        tokens, round_event = play(state, drafting, n_round)
        yield from tokens
        yield round_event
    yield _summary(state, prefill, n_round)


@torch.inference_mode()
def autoregressive_generate(
    target: Target,
    prompt: Prompt,
    *,
    sampling: Sampling,
    max_new_tokens: int,
    generator: torch.Generator,
) -> Iterator[Event]:
    """Plain decoding of the target, one forward per token; yields the same event types."""
    assert max_new_tokens >= 1
    start = run_start(target, None, gamma=0, sampling=sampling, max_new_tokens=max_new_tokens)
    yield start
    state, _, prefill, first = _prefill(target, prompt, start, generator, None)
    yield prefill
    yield first
    clock, step = state.clock, 0
    while state.stop is None:
        step += 1
        # 1. one target forward over the last token -> the next token.
        with clock:
            logits = target.forward([state.answer[-1]], state.cache)[0]
            token, p_token = _first_token(logits, sampling, generator)
            text = state.append(token)
        yield TokenEvent(
            index=len(state.answer) - 1, token_id=token, text=text, kind="target", round=step, p=p_token, t=clock.total
        )
        yield RoundEvent(
            index=step,
            drafted_ids=(),
            drafted_texts=(),
            n_accepted=0,
            target_id=token,
            n_emitted=1,
            stop=state.stop,
            draft_seconds=0.0,
            verify_seconds=clock.last,
            t=clock.total,
        )
    yield _summary(state, prefill, step)


def run(
    target: Target,
    prompt: Prompt,
    *,
    drafter: Drafter | None = None,
    gamma: int = 0,
    sampling: Sampling,
    max_new_tokens: int,
    min_confidence: float = 0.0,
) -> Trace:
    """One whole run as a trace: speculative with a drafter, autoregressive without. Its random
    numbers come from a generator seeded with `sampling.seed` on the target's device."""
    generator = torch.Generator(device=target.device).manual_seed(sampling.seed)
    if drafter is None:
        return Trace.of(
            autoregressive_generate(
                target, prompt, sampling=sampling, max_new_tokens=max_new_tokens, generator=generator
            )
        )
    return Trace.of(
        speculative_generate(
            target,
            drafter,
            prompt,
            gamma=gamma,
            sampling=sampling,
            max_new_tokens=max_new_tokens,
            generator=generator,
            min_confidence=min_confidence,
        )
    )
