"""The lean target: logits as transformers' over chains, trees and rollbacks, lossless decoding on
it, M-RoPE positions passed in, the whole-capacity step that CUDA graphs replay, and the fallback."""

import pytest
import tiny
import tiny_families
import torch
from transformers import Qwen2_5_VLConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLRotaryEmbedding

from demo.engine import lean_lm
from demo.engine.drafters import Drafter
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.engine.speculative import Target, autoregressive_generate, speculative_generate
from demo.engine.target_lm import TargetCache, TargetLM
from demo.engine.trees import keep_path, visibility
from demo.models.families import FAMILIES
from demo.models.loader import Loaded, Preset
from demo.models.vocab import image_placeholder_ids, stop_ids_of

GREEDY = Sampling()
MAX_NEW = 24


def lean_twin(target: Target, lean: bool = True) -> Target:
    """The same model and class as `target`, on the lean path (or on transformers: lean=False)."""
    return type(target)(target.model, target.tokenizer, name=target.name, stop_ids=target.stop_ids, lean=lean)


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    """Each hub family's tiny preset, loaded: family -> Loaded."""
    yield from tiny_families.registered(tmp_path_factory.mktemp("lean-families"), skip_missing=True)


def case(name, world, families):
    """(Loaded, target inputs with an image) for the world's LLaVA or a hub family's tiny preset."""
    loaded = world if name == "world" else families.get(name) or pytest.skip(f"{name} cannot be built here")
    return loaded, loaded.prompt(tiny.images(3)[2], "Describe the image.").target_inputs


def tree_of(g: torch.Generator, n: int) -> list[int]:
    """Random parents of an n-node tree (parents before children; -1: a child of the root)."""
    return [int(torch.randint(-1, i, (1,), generator=g)) if i else -1 for i in range(n)]


def walk(ref: Target, fast: Target, inputs: dict, until: int, tolerance: float = 1e-4) -> tuple[TargetCache, dict]:
    """Prefill both targets, then feed both the same random chains (some rolled back) and trees (the
    path to one node kept), comparing logits at every step, until the lean cache holds `until`
    tokens and 30 forwards ran. Returns the lean cache and the counts of what ran."""
    close = dict(rtol=tolerance, atol=tolerance)
    ref_cache, cache = ref.new_cache(), fast.new_cache()
    assert isinstance(cache, TargetCache) and not isinstance(ref_cache, TargetCache)
    torch.testing.assert_close(fast.prefill(inputs, cache), ref.prefill(inputs, ref_cache), **close)
    g = torch.Generator().manual_seed(11)
    ids = fast.lean._sample_ids(200)
    counts = dict(chains=0, trees=0, rollbacks=0)
    while cache.get_seq_length() < until or counts["chains"] + counts["trees"] < 30:
        n = 1 + int(torch.randint(6, (1,), generator=g))
        feed = [ids[int(i)] for i in torch.randint(len(ids), (n,), generator=g)]
        base = cache.get_seq_length()
        if torch.rand(1, generator=g) < 0.4 and n > 1:  # a tree: the answer's last token, then n - 1 nodes
            parents = tree_of(g, n - 1)
            depths = [0]
            for p in parents:
                depths.append(depths[p + 1] + 1)
            visible = visibility(parents)
            got = fast.forward_tree(feed, depths, visible, cache)
            torch.testing.assert_close(got, ref.forward_tree(feed, depths, visible, ref_cache), **close)
            node = n - 2  # keep the path from the root to the last node, as a verify would
            path = []
            while node >= 0:
                path.insert(0, node)
                node = parents[node]
            for c in (cache, ref_cache):
                keep_path(c, base + 1, path, n - 1)
            counts["trees"] += 1
        else:
            ids_in = torch.tensor(feed) if counts["chains"] % 2 else feed  # ids as a tensor or a list
            torch.testing.assert_close(fast.forward(ids_in, cache), ref.forward(ids_in, ref_cache), **close)
            counts["chains"] += 1
            if n > 1 and torch.rand(1, generator=g) < 0.6:  # reject some drafts
                k = 1 + int(torch.randint(n - 1, (1,), generator=g))
                cache.crop(-k)
                ref_cache.crop(-k)
                counts["rollbacks"] += 1
        assert cache.get_seq_length() == ref_cache.get_seq_length()
    length = cache.get_seq_length()
    for i, layer in enumerate(ref_cache.layers):  # what both caches hold, position by position
        torch.testing.assert_close(cache.keys[i, :, :length], layer.keys[0].to(cache.keys.dtype), **close)
        torch.testing.assert_close(cache.values[i, :, :length], layer.values[0].to(cache.keys.dtype), **close)
    assert counts["chains"] > 10 and counts["trees"] > 5 and counts["rollbacks"] > 3
    return cache, ref_cache


@pytest.mark.parametrize("name", ["world", "llava", "qwen2_5_vl", "idefics3"])
@torch.inference_mode()  # as the engine decodes
def test_lean_logits_match_transformers_over_chains_trees_and_rollbacks(world, families, name, monkeypatch):
    monkeypatch.setattr(lean_lm, "CHUNK", 16)  # small capacity steps: the cache grows several times
    loaded, inputs = case(name, world, families)
    ref, fast = lean_twin(loaded.target, lean=False), lean_twin(loaded.target)
    assert ref.path == "transformers" and fast.path == "lean" and fast.lean.fallback_reason is None
    probe = ref.new_cache()
    ref.prefill(inputs, probe)
    first_capacity = 16 * -(-probe.get_seq_length() // 16)  # the static cache's after the prefill
    cache, ref_cache = walk(ref, fast, inputs, until=first_capacity + 40)
    assert cache.capacity >= first_capacity + 2 * 16
    if name == "qwen2_5_vl":  # the image's M-RoPE positions leave text at an offset from its index
        assert cache.rope_delta == ref_cache.rope_delta != 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@torch.inference_mode()
def test_on_cuda_graph_replays_match_transformers_over_chains_trees_and_rollbacks(tok):
    """The GPU check of the lean target (no GPU in CI): graphs captured by prepare, replayed for
    chains and trees with rollbacks, logits as transformers' (fp32)."""
    model = tiny.llava(tok).to("cuda")
    ref = Target(model, tok, name="t", stop_ids=frozenset({tok.eos_token_id}), lean=False)
    fast = Target(model, tok, name="t", stop_ids=frozenset({tok.eos_token_id}), lean=True)
    fast.prepare(capacity=256, widths=(1, 2, 3, 4, 5, 6))
    assert fast.path == "lean + CUDA graphs", (fast.lean.fallback_reason, fast.lean.graphs_reason)
    processor = tiny.processor(tok)
    inputs = processor(images=[tiny.images(1)[0]], text="<image>\nDescribe the image.", return_tensors="pt")
    inputs = {k: v.to("cuda") for k, v in inputs.items()}
    cache, _ = walk(ref, fast, inputs, until=120, tolerance=1e-3)
    assert cache.graphs is not None and cache.graphs.replays > 30


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_greedy_output_on_graphed_lean_target_identical_to_the_target_alone(tok):
    """Both lanes on the graphed lean target (fp32): AR, chain SPD and tree SPD give the tokens
    of the target alone through transformers."""
    model = tiny.llava(tok).to("cuda")
    processor = tiny.processor(tok)
    stop = stop_ids_of(tok, model)
    plain = Target(model, tok, name="tiny-llava", stop_ids=stop, lean=False)
    fast = Target(model, tok, name="tiny-llava", stop_ids=stop, lean=True)
    fast.prepare(capacity=256)
    assert fast.path == "lean + CUDA graphs", (fast.lean.fallback_reason, fast.lean.graphs_reason)
    loaded = Loaded(Preset("tiny-cuda", "", ()), plain, processor, torch.device("cuda"))
    loaded.drafters["text"] = Drafter(
        tiny.text_part_of(model, tok).to("cuda"),
        name="text",
        kind="text-only",
        target_vocab_size=plain.vocab_size,
        stop_ids=stop,
        blocked_ids=image_placeholder_ids(processor),
    )
    for image, question in list(zip(tiny.images(4), tiny.QUESTIONS))[::2]:
        alone = decode(plain, loaded, (image, question)).summary.token_ids
        assert decode(fast, loaded, (image, question)).summary.token_ids == alone
        for drafter, gamma in (("text", 4), ("text", 1), ("text+tree", 3)):
            trace = decode(fast, loaded, (image, question), drafter, gamma)
            assert trace.start.target_path == "lean + CUDA graphs" and trace.summary.token_ids == alone


def decode(target, loaded, inputs_of, drafter=None, gamma=0):
    """One greedy run on `target` with `loaded`'s prompts and drafters (AR without a drafter)."""
    image, question = inputs_of
    if drafter is None:
        events = autoregressive_generate(
            target,
            loaded.prompt(image, question),
            sampling=GREEDY,
            max_new_tokens=MAX_NEW,
            generator=torch.Generator().manual_seed(0),
        )
    else:
        events = speculative_generate(
            target,
            loaded.drafter(drafter),
            loaded.prompt(image, question, drafter),
            gamma=gamma,
            sampling=GREEDY,
            max_new_tokens=MAX_NEW,
            generator=torch.Generator().manual_seed(0),
        )
    return Trace.of(events)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["world", "qwen2_5_vl"])
def test_greedy_output_on_the_lean_target_identical_to_the_target_alone(world, families, name):
    loaded, _ = case(name, world, families)
    fast = lean_twin(loaded.target)
    runs = {
        "world": (("text-partly", 4), ("image-partly", 1), ("text-partly+tree", 4)),
        "qwen2_5_vl": (("text", 1), ("text", 4), ("text+tree", 3)),
    }[name]
    accepted = 0
    for image, question in list(zip(tiny.images(4), tiny.QUESTIONS))[::2]:
        alone = decode(loaded.target, loaded, (image, question)).summary.token_ids  # transformers
        lean_ar = decode(fast, loaded, (image, question))
        assert lean_ar.start.target_path == "lean" and lean_ar.summary.token_ids == alone
        for drafter, gamma in runs:
            trace = decode(fast, loaded, (image, question), drafter, gamma)
            assert trace.start.target_path == "lean" and trace.summary.token_ids == alone, (drafter, gamma)
            accepted += sum(r.n_accepted for r in trace.rounds)
    assert accepted > 0


@torch.inference_mode()
def test_step_over_the_whole_capacity_as_a_graph_runs_it_equals_the_eager_step(world):
    """A CUDA graph replays `step` over every slot of its capacity, the slots past the new tokens
    masked; here on the CPU, with stale values in those slots, it gives the eager step's logits."""
    fast = lean_twin(world.target)
    assert fast.path == "lean"
    lm, ids = fast.lean.lm, torch.tensor(fast.lean._sample_ids(30))
    eager, whole = lm.new_cache(64), lm.new_cache(64)
    whole.keys.normal_()  # stale, finite values everywhere: only masking keeps them out
    whole.values.normal_()
    tables = lm.rope(64)
    causal = torch.ones(20, 20, dtype=torch.bool).tril()
    positions = torch.arange(20)[None]
    for cache, span in ((eager, 20), (whole, 64)):
        lm.step(cache, ids[:20], positions, torch.tensor([0]), causal, span, tables)
        cache.length = 20
    parents = [-1, 0, 0, 1, -1]
    depths = torch.tensor([0, 1, 2, 2, 3, 1])
    visible = visibility(parents)
    for cache, span in ((eager, 26), (whole, 64)):
        got = lm.step(cache, ids[20:26], 20 + depths[None], torch.tensor([20]), visible, span, tables)
        cache.length = 26
        if cache is eager:
            want = got
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(whole.keys[:, :, :26], eager.keys[:, :, :26])


def test_mrope_rotary_reads_each_dimension_from_its_axis_as_transformers_does(families):
    loaded = families.get("qwen2_5_vl") or pytest.skip("qwen2_5_vl cannot be built here")
    lm = TargetLM(loaded.target.model)
    assert lm.axes == 3
    positions = torch.tensor([[5, 9, 40], [7, 2, 40], [30, 1, 41]])  # three unequal axes [3, n]
    config: Qwen2_5_VLConfig = loaded.target.model.config.text_config
    rotary = Qwen2_5_VLRotaryEmbedding(config)
    want_cos, want_sin = rotary(torch.empty(0), positions[:, None])  # [1, n, D]
    cos, sin = lm._rotary(positions, lm.rope(64))  # [n, 1, D]
    torch.testing.assert_close(cos[:, 0], want_cos[0])
    torch.testing.assert_close(sin[:, 0], want_sin[0])
    assert not torch.equal(cos[0, 0], lm._rotary(positions[:1].expand(3, -1), lm.rope(64))[0][0, 0])


def test_uncovered_target_runs_through_transformers_and_says_why(world, tok):
    torch.manual_seed(0)
    model = tiny.llava(tok)
    model.config.text_config.hidden_act = "gelu"  # LeanLM's MLP is SiLU-gated only
    target = Target(model, tok, name="gelu", stop_ids=world.target.stop_ids, lean=True)
    assert target.path == "transformers" and "activation 'gelu'" in target.lean.fallback_reason
    image, question = tiny.images(1)[0], tiny.QUESTIONS[0]
    trace = decode(target, world, (image, question))
    assert trace.start.target_path == "transformers" and not isinstance(target.new_cache(), TargetCache)


def test_lean_target_that_fails_its_check_falls_back_to_transformers(world, monkeypatch):
    real = TargetLM.step
    monkeypatch.setattr(TargetLM, "step", lambda self, *args: real(self, *args) + 0.5)  # wrong logits
    target = lean_twin(world.target)
    assert target.path == "transformers" and "failed its check" in target.lean.fallback_reason
    image, question = tiny.images(1)[0], tiny.QUESTIONS[0]
    trace = decode(target, world, (image, question), "text-partly", 4)
    assert trace.start.target_path == "transformers"
    assert trace.summary.token_ids == decode(world.target, world, (image, question)).summary.token_ids


def test_the_lean_target_is_off_on_a_cpu_unless_asked_and_its_prefill_is_transformers():
    tok = tiny.tokenizer()
    model = tiny.llava(tok)
    plain = FAMILIES["llava"].target_class(model, tok, name="t", stop_ids=frozenset())
    assert plain.path == "transformers" and "off on this device" in plain.lean.fallback_reason
