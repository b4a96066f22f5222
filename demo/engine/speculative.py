"""Speculative and autoregressive decoding of a multimodal target, as streams of typed events.

Notation (Leviathan et al. 2023; Gagrani et al. 2024 for the multimodal setting):
    p      the target's next-token distribution (the multimodal model that sees the image)
    q      the drafter's next-token distribution
    gamma  how many tokens the drafter proposes per round
    tau    block efficiency: answer tokens per target forward in decoding, bonus included

A run is one prefill (`_prefill`, shared by both generators) and then rounds. A speculative
round (`speculative_round`): (1) the drafter proposes gamma tokens; (2) one target forward over
[last token] + drafts gives p at every draft position and one past, and the rule in
`demo.engine.sampling` accepts a prefix of the drafts and adds one token of the target's own (a
resample at the first rejection, or a bonus when all were accepted); (3) one transfer brings the
verdict to the host; (4) both KV caches forget the rejected drafts; (5) the round's tokens are
emitted, cut after a stop. The image is encoded once, at prefill; later forwards carry only token
ids. A drafter may propose nothing in a round (prompt lookup without a match, or the token
budget's last token): that round is one target step. A tree drafter's rounds are
`demo.engine.trees.tree_round`, the same steps over a token tree (its walk reads back as it goes).

One host synchronisation per round: steps 1 and 2 run on the device with nothing read back
(drafts, masks, q, the stop cut, the rule and the inspector's top-k), and step 3 reads all the
events need in one `.tolist()`. On a GPU the host queues a whole round and waits once; on a CPU
the same code runs, and stays exact. Adaptive drafting (a confidence threshold) is the exception:
it reads q's top probability at each draft step (`demo.engine.drafters`).

    speculative_generate / autoregressive_generate   the runs, as event generators
    run(...) -> Trace                                 one whole run, for the benchmark and checks

Cache invariant for the target, at the top of every round:
    cache = prompt + answer[:-1]       (the last answer token is fed by the next forward)

Both generators measure their own compute time and stop the clock while the consumer holds
them, so `event.t` is the time the run itself used. Nothing here knows about Gradio or plotly.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from demo.engine import trees
from demo.engine.decoding import INSPECT_TOP_K, Decoding, Laps, Prompt, Stopwatch, Target
from demo.engine.detokenize import Detokenizer
from demo.engine.drafters import Drafter, Drafting, ids_on
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
    """The target's own token from its logits [V], and its p: read back in one transfer."""
    p = warp(logits, sampling)  # [V]
    token = (logits.argmax() if sampling.greedy else sample(p, generator)).reshape(1)  # [1]
    token_id, p_token = torch.cat([token.double(), p.gather(0, token).double()]).tolist()
    return int(token_id), p_token


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
) -> tuple[Decoding, Drafting | None, PrefillEvent, TokenEvent]:
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
        del ids  # the drafts themselves: the round reads them from the same record
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
) -> torch.Tensor:
    """One target forward over [last] + drafts, then the stop cut and the acceptance rule, all on
    the device; returns the round's record, packed in one float64 vector for one transfer (ids are
    exact in float64): [n_drafts, n_accepted, token, p(token), law(token)], then per draft its id,
    p, q, acceptance probability and u, then the inspector's top k of p (n + 1 rows), of q (n rows)
    and of the token's law (`Verdict.read` unpacks it).

    last [1] and drafts [n] long; q [n, V]; stop_ids [s] long: the target's stop ids.
    """
    n = drafts.shape[0]
    logits = target.forward(torch.cat([last, drafts]), cache)  # [n+1, V]
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
    return torch.cat([t.double().reshape(-1) for t in head + per_draft + tops])


def _ranked(top: tuple[list[float], list[int]], tokenizer) -> tuple[tuple[str, float], ...]:
    """A top-k list (probabilities, ids) as the inspector shows it: (text, probability), nonzero only."""
    return tuple((tokenizer.decode([i]), pr) for pr, i in zip(*top, strict=True) if pr > 0)


def round_detail(drafts: list[int], v: Verdict, tokenizer) -> RoundDetail:
    """The inspector's view of a round, from what verification already brought back (no model
    call, no transfer): the top k of p and q at each checked draft, the uniform draws u, and the
    law of the target's token (the residual at a sampled rejection, else p)."""
    n_checked = min(v.n_accepted + 1, len(drafts))
    positions = tuple(
        Position(
            draft=tokenizer.decode([drafts[i]]),
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
def speculative_round(state: Decoding, drafting: Drafting, index: int) -> tuple[list[TokenEvent], RoundEvent]:
    """One round of speculative decoding: draft, verify, read back once, roll back, emit. Returns
    the round's token events and its round event, all stamped with the run's clock at the round's end."""
    target, start, clock, answer = state.target, state.start, state.clock, state.answer
    laps = Laps(target.device)  # drafting and verifying timed apart, with no synchronisation between
    with clock:
        laps.mark()
        # 1. draft on the device: never more than the token budget can take (the round adds one more).
        n_draft = min(start.gamma, start.max_new_tokens - len(answer) - 1)
        proposed, q = drafting.propose(answer, n_draft, start.sampling, state.generator, start.drafter.min_confidence)
        laps.mark()  # proposed [n] long, q [n, V]

        # 2. verify all drafts in one target forward; the rule accepts a prefix and adds the
        #    target's token, on the device.
        last = ids_on(target.device, [answer[-1]])  # [1]
        stops = ids_on(target.device, sorted(target.stop_ids))  # [s]
        record = verify(target, state.cache, last, proposed, q, start.sampling, state.generator, stops)
        laps.mark()

        # 3. the round's one transfer: everything the events and the inspector need.
        n = proposed.shape[0]
        values = record.tolist()
        v = Verdict.read(values, n, min(INSPECT_TOP_K, q.shape[-1]), start.sampling.greedy)
        drafts = [int(x) for x in values[5 : 5 + v.n_drafts]]  # cut after the first stop

        # 4. roll back: the target cache holds prompt + answer + all n drafts; drop those not
        #    accepted (the round's last token is fed by the next round's forward). The drafter
        #    keeps what it holds of the answer's first len(answer) + n_accepted tokens.
        if n > v.n_accepted:
            state.cache.crop(-(n - v.n_accepted))
        drafting.rollback(len(answer) + v.n_accepted)
        # 5. emit the accepted drafts and the target's token, cut after the first stop.
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
    draft_s, verify_s = laps.seconds()
    detail = round_detail(drafts, v, target.tokenizer)  # off the clock: display only
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
            logits = target.forward(ids_on(target.device, [state.answer[-1]]), state.cache)[0]  # [V]
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
