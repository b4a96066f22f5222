"""Speculative and autoregressive decoding of a multimodal target, as streams of typed events.

A run is one prefill, where the drafter's capabilities are read once, then rounds. A round
(`speculative_round`): (1) the drafter proposes gamma tokens, handed the target's features when
it reads them; (2) one target forward verifies them and the rule (`verification`, `sampling`)
accepts a prefix and adds the target's own token; (3) one transfer reads the verdict back; (4)
both caches forget the rejected drafts; (5) the round's tokens are emitted, cut after a stop.
Token trees play `trees.tree_round` instead. Target cache at the top of every round: prompt +
answer[:-1]. Each generator times its own compute (`event.t`), its clock stopped while the
consumer holds it. p is the target's distribution, q the drafter's. More: docs/modules.md.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from demo.engine import trees
from demo.engine.decoding import INSPECT_TOP_K, Decoding, Laps, Prompt, Stopwatch, Target, emitted, round_events
from demo.engine.detokenize import Detokenizer, piece_texts
from demo.engine.drafters import Drafter, Drafting, ids_on
from demo.engine.events import (
    DrafterInfo,
    Event,
    PrefillEvent,
    RoundEvent,
    RunStart,
    RunSummary,
    TokenEvent,
    Trace,
    tree_refusal,
)
from demo.engine.sampling import Sampling, sample, warp
from demo.engine.verification import Verdict, round_detail, token_fields, verify


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
    if drafter is not None:  # its capabilities, read once: they hold for the whole run
        state.reads_features, state.staged = drafter.reads_features, drafter.staged
    with clock:
        out = target.prefill(prompt.target_inputs, state.cache, state.reads_features)
        logits, state.features = out if state.reads_features else (out, None)  # the prompt's rows, for round 1
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
        proposed, q = drafting.propose(
            answer, n_draft, start.sampling, state.generator, start.drafter.min_confidence, state.features
        )
        laps.mark()  # proposed [n] long, q [n, V]

        # 2. verify all drafts in one target forward; the rule accepts a prefix and adds the
        #    target's token, on the device.
        last = ids_on(target.device, [answer[-1]])  # [1]
        stops = ids_on(target.device, sorted(target.stop_ids))  # [s]
        record, features = verify(
            target, state.cache, last, proposed, q, start.sampling, state.generator, stops, state.reads_features
        )
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
        if state.reads_features:  # the accepted positions' hidden states, for the next round's propose
            state.features = features[: v.n_accepted + 1]
        # 5. emit the accepted drafts and the target's token, cut after the first stop.
        drafted_texts = piece_texts(target.tokenizer, drafts)  # whole characters, a split one on its last draft
        tokens = emitted(
            state, drafts[: v.n_accepted] + [v.token], index, lambda j: token_fields(j, drafts, drafted_texts, v)
        )
    seconds = laps.seconds()
    detail = round_detail(drafts, drafted_texts, v, target.tokenizer)  # off the clock: display only
    stages = drafting.stages if state.staged else None  # its lookup stage's (guesses, confirmed)
    return round_events(
        state, index, drafts, drafted_texts, v.n_accepted, v.token, tokens, seconds, detail=detail, stages=stages
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
    """Speculative decoding of `target`, drafting with `drafter`; yields the run's events. gamma:
    the most drafts per round; min_confidence > 0: adaptive draft length (`DraftState.propose`)."""
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
            fields = emitted(state, [token], step, lambda j: dict(kind="target", p=p_token))
        tokens, round_event = round_events(state, step, [], (), 0, token, fields, (0.0, clock.last))
        yield from tokens
        yield round_event
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
    kw = dict(sampling=sampling, max_new_tokens=max_new_tokens, generator=generator)
    if drafter is None:
        return Trace.of(autoregressive_generate(target, prompt, **kw))
    return Trace.of(speculative_generate(target, drafter, prompt, gamma=gamma, min_confidence=min_confidence, **kw))
