"""The decoding loops on tiny random models: exactness, stops, rollback, text pieces."""

import itertools

import pytest
import races
import tiny
import torch
from races import CASES, GREEDY, MAX_NEW, ar, spd
from tokenizers import Tokenizer, models
from transformers import DynamicCache, PreTrainedTokenizerFast

from demo.engine import metrics, speculative
from demo.engine.compat import cache_keyword
from demo.engine.detokenize import REPLACEMENT
from demo.engine.drafters import Drafter
from demo.engine.events import DrafterInfo, PrefillEvent, RoundEvent, RunStart, RunSummary, TokenEvent, Trace
from demo.engine.sampling import Sampling
from demo.engine.speculative import Target, speculative_generate
from demo.models.vocab import VocabMismatch, check_vocab_compatible


@pytest.fixture(scope="module")
def references(world):
    """The target's own greedy `generate` for every case."""
    return races.references(world, CASES)


AGREEMENT = {  # drafter -> (lowest alpha over the cases, highest alpha)
    "image-always": (1.0, 1.0),
    "text-never": (0.0, 0.0),
    "image-never": (0.0, 0.0),
    "text-partly": (0.0, 1.0),
    "image-partly": (0.0, 1.0),
}


@pytest.mark.parametrize("gamma", [1, 2, pytest.param(4, marks=pytest.mark.fast), 8])  # γ = 4 in the fast tier
@pytest.mark.parametrize("drafter", list(AGREEMENT))
def test_greedy_speculative_output_identical_to_target_generate(world, references, drafter, gamma):
    alphas = []
    for (image, question), reference in zip(CASES, references):
        trace = spd(world, drafter, image, question, gamma)
        assert list(trace.summary.token_ids) == reference
        alphas.append(metrics.alpha(trace))
    low, high = AGREEMENT[drafter]
    assert low <= min(alphas) and max(alphas) <= high
    if drafter.endswith("partly"):  # partly: some cases accept some drafts, none accepts all
        assert 0.0 < sum(alphas) / len(alphas) < 1.0


def test_adaptive_draft_length_drafts_less_and_stays_identical_to_generate(world, references):
    fixed_drafts = adaptive_drafts = 0
    for (image, question), reference in zip(CASES, references):
        fixed = spd(world, "image-partly", image, question, 8)
        adaptive = spd(world, "image-partly", image, question, 8, min_confidence=0.5)
        assert list(adaptive.summary.token_ids) == reference
        fixed_drafts += metrics.drafted(fixed)
        adaptive_drafts += metrics.drafted(adaptive)
        assert all(len(r.drafted_ids) >= 1 for r in adaptive.rounds if r.stop is None)
    assert adaptive_drafts < fixed_drafts


@pytest.mark.fast
def test_greedy_autoregressive_output_identical_to_target_generate(world, references):
    for (image, question), reference in zip(CASES, references):
        assert list(ar(world, image, question).summary.token_ids) == reference


def test_event_stream_has_start_then_prefill_then_token_groups_then_summary(world):
    image, question = CASES[0]
    events = list(
        speculative_generate(
            world.target,
            world.drafter("image-partly"),
            world.prompt(image, question, "image-partly"),
            gamma=4,
            sampling=GREEDY,
            max_new_tokens=MAX_NEW,
            generator=torch.Generator().manual_seed(0),
        )
    )
    assert isinstance(events[0], RunStart) and isinstance(events[1], PrefillEvent)
    assert isinstance(events[-1], RunSummary)
    assert isinstance(events[2], TokenEvent) and events[2].round == 0 and events[2].kind == "target"
    pending = []
    for event in events[3:-1]:
        if isinstance(event, TokenEvent):
            pending.append(event)
            continue
        assert isinstance(event, RoundEvent)
        assert [t.round for t in pending] == [event.index] * event.n_emitted
        kinds = [t.kind for t in pending]
        assert kinds[: event.n_accepted] == ["accepted"] * event.n_accepted
        n = len(event.drafted_ids)
        own = "resampled" if event.n_accepted < n else "bonus" if n else "target"  # no drafts: budget's last token
        assert kinds[event.n_accepted :] == [own]
        assert [t.token_id for t in pending] == [*event.drafted_ids[: event.n_accepted], event.target_id]
        pending = []
    clocks = [e.t for e in events]
    assert clocks == sorted(clocks) and clocks[0] == 0.0 and clocks[1] > 0  # nothing computed before the start


def test_resampled_token_reports_the_rejected_draft(world):
    trace = spd(world, "image-partly", *CASES[1], gamma=4)
    resampled = [t for t in trace.tokens if t.kind == "resampled"]
    assert resampled
    for token in resampled:
        r = trace.rounds[token.round - 1]
        assert token.rejection.id == r.drafted_ids[r.n_accepted] != token.token_id
        assert token.rejection.text == r.drafted_texts[r.n_accepted]
        assert token.rejection.accept_prob == 0.0 and 0.0 < token.rejection.q <= 1.0
    for token in trace.tokens:
        if token.kind == "accepted":
            assert token.accept_prob == 1.0 and 0.0 < token.q <= 1.0
        assert (token.rejection is None) == (token.kind != "resampled")


@pytest.mark.fast
def test_tau_counts_bonus_tokens_and_matches_the_rounds(world):
    trace = spd(world, "image-always", *CASES[2], gamma=4)
    # Always agreeing: every full round emits gamma drafts + 1 bonus.
    full = [r for r in trace.rounds if r.stop is None]
    assert all(r.n_emitted == 5 and r.n_accepted == 4 for r in full)
    assert metrics.tau(trace) == (len(trace.tokens) - 1) / len(trace.rounds)
    assert metrics.accept_length_histogram(trace)[4] == len([r for r in trace.rounds if r.n_accepted == 4])


@pytest.mark.fast
def test_max_new_tokens_is_never_exceeded(world):
    for drafter, gamma, max_new in itertools.product(["image-always", "text-partly"], [1, 3, 8], [1, 2, 5, 9]):
        trace = spd(world, drafter, *CASES[3], gamma=gamma, max_new=max_new)
        reference = ar(world, *CASES[3], max_new=max_new)
        assert trace.summary.token_ids == reference.summary.token_ids
        assert len(trace.summary.token_ids) <= max_new
        if trace.summary.stop == "max_new_tokens":
            assert len(trace.summary.token_ids) == max_new


def with_stop(world, drafter: str, stop_id: int) -> tuple[Target, Drafter]:
    """The same target and drafter, stopping at stop_id."""
    target = world.target
    stopping = Target(target.model, target.tokenizer, name="stop", stop_ids=frozenset({stop_id}))
    d = world.drafter(drafter)
    d2 = Drafter(
        d.model,
        name=d.name,
        kind=d.kind,
        target_vocab_size=target.vocab_size,
        stop_ids=frozenset({stop_id}),
        blocked_ids=d.blocked_ids,
    )
    return stopping, d2


@pytest.mark.parametrize("drafter", ["image-always", "image-partly", "text-partly"])
def test_generation_stops_at_the_first_stop_token_and_truncates_the_round(world, drafter):
    image, question = CASES[4]
    free = ar(world, image, question, max_new=MAX_NEW).summary.token_ids
    k = 6
    stop_id = free[k]
    first = free.index(stop_id)
    target, d = with_stop(world, drafter, stop_id)
    for gamma in (1, 4, 8):
        events = speculative_generate(
            target,
            d,
            world.prompt(image, question, drafter),
            gamma=gamma,
            sampling=GREEDY,
            max_new_tokens=MAX_NEW,
            generator=torch.Generator().manual_seed(0),
        )
        trace = Trace.of(events)
        assert trace.summary.token_ids == free[: first + 1]
        assert trace.summary.stop == "eos" and trace.rounds[-1].stop == "eos"
        assert [r.stop for r in trace.rounds[:-1]] == [None] * (len(trace.rounds) - 1)
    if drafter == "image-always" and first > 1:
        # The drafter drafted the stop token and was accepted: the bonus after it is cut.
        last = trace.rounds[-1]
        assert last.drafted_ids[-1] == stop_id and last.n_emitted == last.n_accepted


@pytest.mark.slow
def test_text_pieces_concatenate_to_the_decoded_answer(world):
    cut = 0
    for drafter, (image, question) in itertools.product(["text-partly", "image-partly"], CASES):
        for trace in (spd(world, drafter, image, question, 4), ar(world, image, question)):
            decoded = world.target.tokenizer.decode(trace.summary.token_ids, skip_special_tokens=True)
            # An answer the token limit cuts inside a character ends on its last whole character,
            # where the tokenizer writes U+FFFD for the incomplete bytes.
            whole = decoded.rstrip(REPLACEMENT)
            cut += whole != decoded
            assert "".join(t.text for t in trace.tokens) == whole == trace.summary.text
    assert cut > 0  # the tiny world's byte tokens do cut some answers inside a character


class RecordingTarget(Target):
    """A target that remembers each decoding forward's input ids and logits."""

    def forward(self, ids, cache, features=False):
        out = super().forward(ids, cache, features)
        self.calls.append((list(ids), (out[0] if features else out).clone()))
        return out


@pytest.mark.fast
def test_after_rejection_target_logits_equal_fresh_forward_over_same_prefix(world):
    image, question = CASES[5]
    t = world.target
    target = RecordingTarget(t.model, t.tokenizer, name="rec", stop_ids=t.stop_ids)
    target.calls = []
    prompt = world.prompt(image, question, "image-partly")
    trace = Trace.of(
        speculative_generate(
            target,
            world.drafter("image-partly"),
            prompt,
            gamma=4,
            sampling=GREEDY,
            max_new_tokens=MAX_NEW,
            generator=torch.Generator().manual_seed(0),
        )
    )
    answer = list(trace.summary.token_ids)
    checked = 0
    for r, (call_ids, logits) in zip(trace.rounds[1:], target.calls[1:]):
        previous = trace.rounds[r.index - 2]
        if previous.n_accepted == len(previous.drafted_ids):
            continue  # only rounds right after a rejection
        n_before = sum(x.n_emitted for x in trace.rounds[: r.index - 1]) + 1
        assert call_ids[0] == answer[n_before - 1]
        inputs = dict(prompt.target_inputs)
        inputs["input_ids"] = torch.cat([inputs["input_ids"], torch.tensor([answer[:n_before]])], dim=1)
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        with torch.inference_mode():
            fresh = t.model(**inputs).logits[0, -1]
        torch.testing.assert_close(logits[0], fresh, rtol=1e-4, atol=1e-4)
        assert logits[0].argmax() == fresh.argmax()
        checked += 1
    assert checked >= 2


def test_drafter_with_prefix_vocabulary_never_proposes_ids_it_lacks(world, tok, references):
    small = tiny.llama(tok)
    small.resize_token_embeddings(len(tok) - 50)
    lacking = Drafter(small, name="small-vocab", kind="text-only", blocked_ids=frozenset(), **races.verified_by(world))
    world.drafters["small-vocab"] = lacking
    for (image, question), reference in zip(CASES, references):
        trace = spd(world, "small-vocab", image, question, gamma=4, sampling=Sampling(greedy=False, seed=1))
        assert all(d < len(tok) - 50 for r in trace.rounds for d in r.drafted_ids)
        trace = spd(world, "small-vocab", image, question, gamma=4)
        assert list(trace.summary.token_ids) == reference
    del world.drafters["small-vocab"]


@pytest.mark.fast
def test_vocab_check_refuses_a_drafter_whose_ids_mean_other_tokens(tok):
    extended = tiny.tokenizer()
    extended.add_tokens(["zzqx"])  # a new id past the end is fine: only shared ids are compared
    check_vocab_compatible(tok, extended, "extended")
    vocab = tok.get_vocab()
    a, b = tok.convert_ids_to_tokens([100, 101])
    vocab[a], vocab[b] = 101, 100
    swapped = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")))
    with pytest.raises(VocabMismatch, match=f"token id 100 is {b!r} for the drafter but {a!r} for the target"):
        check_vocab_compatible(tok, swapped, "swapped")


# --- one round, the run's first event, per-run drafter state, run() ----------------------------


def fresh_cache(model, inputs: dict, extra: list[int]) -> DynamicCache:
    """The cache one forward builds over a prompt's inputs followed by extra ids."""
    inputs = dict(inputs)
    inputs["input_ids"] = torch.cat([inputs["input_ids"], torch.tensor([extra], dtype=torch.long)], dim=1)
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(**inputs, **{cache_keyword(model): cache}, use_cache=True)
    return cache


def assert_same_cache(cache: DynamicCache, expected: DynamicCache) -> None:
    assert cache.get_seq_length() == expected.get_seq_length()
    for layer, want in zip(cache.layers, expected.layers, strict=True):
        torch.testing.assert_close(layer.keys, want.keys, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(layer.values, want.values, rtol=1e-4, atol=1e-4)


@pytest.mark.fast
@pytest.mark.parametrize("drafter", ["image-partly", "text-partly"])
def test_round_rollback_keeps_exactly_the_accepted_tokens_in_both_caches(world, drafter):
    image, question = CASES[1]
    prompt = world.prompt(image, question, drafter)
    d = world.drafter(drafter)
    start = speculative.run_start(world.target, d, gamma=4, sampling=GREEDY, max_new_tokens=MAX_NEW)
    state, drafting, _, _ = speculative._prefill(world.target, prompt, start, torch.Generator().manual_seed(0), d)
    rejected_rounds, index = 0, 0
    while state.stop is None:
        index += 1
        before = len(state.answer)
        tokens, r = speculative.speculative_round(state, drafting, index)
        # The round emits the accepted drafts, then the target's own token, onto the answer.
        assert [t.token_id for t in tokens] == [*r.drafted_ids[: r.n_accepted], r.target_id]
        assert state.answer[before:] == [t.token_id for t in tokens] and r.n_emitted == len(tokens)
        if state.stop:
            break  # the last round may be cut at the stop; nothing decodes after it
        rejected_rounds += r.n_accepted < len(r.drafted_ids)
        # Target: prompt + answer[:-1] (the last token is fed by the next round), as one fresh forward builds it.
        assert_same_cache(state.cache, fresh_cache(world.target.model, prompt.target_inputs, state.answer[:-1]))
        # Drafter: its prompt + the answer tokens it was fed, each one the answer's token at its position.
        assert drafting.fed_tokens == [state.answer[i] for i in drafting.fed_positions]
        assert_same_cache(drafting.cache, fresh_cache(d.model, prompt.drafter_inputs, drafting.fed_tokens))
    assert rejected_rounds >= 2


def test_first_event_says_what_runs_and_the_trace_alone_gives_its_metrics(world):
    image, question = CASES[0]
    d = world.drafter("image-partly")
    sampling = Sampling(greedy=False, temperature=0.7, top_p=0.9, seed=3)
    spd_trace = speculative.run(
        world.target,
        world.prompt(image, question, "image-partly"),
        drafter=d,
        gamma=3,
        sampling=sampling,
        max_new_tokens=9,
        min_confidence=0.25,
    )
    assert spd_trace.start == RunStart(
        mode="speculative",
        target="tiny-llava",
        target_params=world.target.n_params,
        drafter=DrafterInfo(name="image-partly", kind="image-aware", params=d.n_params, min_confidence=0.25),
        gamma=3,
        sampling=sampling,
        max_new_tokens=9,
        t=0.0,
    )
    ar_trace = speculative.run(world.target, world.prompt(image, question), sampling=sampling, max_new_tokens=9)
    assert ar_trace.start == RunStart("autoregressive", "tiny-llava", world.target.n_params, None, 0, sampling, 9)
    numbers = metrics.summary(spd_trace)  # no gamma passed: the trace says it
    assert len(numbers["acceptance_by_position"]) == 3 and len(numbers["accept_length_histogram"]) == 4
    assert numbers["c"] == d.n_params / world.target.n_params
    assert numbers["mbsu"] == numbers["tau"] / (1 + 3 * numbers["c"]) == metrics.mbsu(spd_trace)
    assert "alpha" not in metrics.summary(ar_trace) and spd_trace.greedy is False


def test_two_interleaved_runs_of_one_drafter_do_not_share_its_state(world):
    d = world.drafter("image-partly")
    assert world.drafter("image-partly") is d  # the loaded drafter is shared; each run starts its own state

    def events(image, question):
        return speculative_generate(
            world.target,
            d,
            world.prompt(image, question, "image-partly"),
            gamma=4,
            sampling=GREEDY,
            max_new_tokens=MAX_NEW,
            generator=torch.Generator().manual_seed(0),
        )

    cases = {"a": CASES[1], "b": CASES[6]}
    alone = {name: Trace.of(events(*case)) for name, case in cases.items()}
    together = {name: Trace() for name in cases}
    live = {name: events(*case) for name, case in cases.items()}
    while live:  # strict alternation: every round of one run falls between rounds of the other
        for name in list(live):
            event = next(live[name], None)
            if event is None:
                del live[name]
            else:
                together[name].add(event)
    for name in cases:
        assert [r.drafted_ids for r in together[name].rounds] == [r.drafted_ids for r in alone[name].rounds]
        assert together[name].summary.token_ids == alone[name].summary.token_ids
    assert any(r.n_accepted for t in alone.values() for r in t.rounds)  # the drafter's cache mattered
    inputs = world.prompt(*CASES[1], "image-partly").drafter_inputs
    assert d.start(inputs).cache is not d.start(inputs).cache


def test_run_is_the_event_stream_seeded_from_the_sampling_settings(world):
    sampling = Sampling(greedy=False, seed=5)
    prompt = world.prompt(*CASES[2], "text-partly")
    d = world.drafter("text-partly")
    trace = speculative.run(world.target, prompt, drafter=d, gamma=3, sampling=sampling, max_new_tokens=MAX_NEW)
    by_hand = Trace.of(
        speculative_generate(
            world.target,
            d,
            prompt,
            gamma=3,
            sampling=sampling,
            max_new_tokens=MAX_NEW,
            generator=torch.Generator().manual_seed(5),
        )
    )
    assert trace.summary.token_ids == by_hand.summary.token_ids
    assert [r.drafted_ids for r in trace.rounds] == [r.drafted_ids for r in by_hand.rounds]
    ar_run = speculative.run(world.target, prompt, sampling=sampling, max_new_tokens=MAX_NEW)
    ar_by_hand = ar(world, *CASES[2], sampling=sampling, seed=5)
    assert ar_run.summary.token_ids == ar_by_hand.summary.token_ids and ar_run.start.mode == "autoregressive"
