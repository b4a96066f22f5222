"""The lean drafting path: logits as transformers', exact speculative output, and the fallback."""

import numpy as np
import pytest
import races
import tiny
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

from demo.engine import lean, lean_lm, lean_steps, speculative
from demo.engine.drafters import Drafter, DraftState
from demo.engine.lean import LeanDrafter
from demo.engine.lean_lm import LeanLM, StaticCache
from demo.engine.sampling import Sampling, warp
from demo.models import loader

GREEDY = Sampling()
MAX_NEW = 24
CASES = list(zip(tiny.images(len(tiny.QUESTIONS)), tiny.QUESTIONS))[::2]  # 6 of the 11 cases


def qwen2(tok) -> Qwen2ForCausalLM:
    """A tiny Qwen2 (Llama plus q/k/v biases), grouped-query attention, random weights."""
    torch.manual_seed(4)
    config = Qwen2Config(**tiny.lm_text(len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # random biases, so the test sees them (they start at zero)
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


@pytest.fixture(scope="module")
def drafters(world, tok):
    """Each test drafter on both paths: name -> (transformers Drafter, LeanDrafter)."""
    base = {name: world.drafter(name) for name in ("text-partly", "image-partly")}
    blocked = base["text-partly"].blocked_ids
    base["qwen2"] = Drafter(qwen2(tok), name="qwen2", kind="text-only", blocked_ids=blocked, **races.verified_by(world))
    return {name: (d, lean.on_path(d, "lean")) for name, d in base.items()}


@pytest.fixture(scope="module")
def torch_steps(drafters):
    """Each test drafter on LeanLM's torch step (where "lean" takes the NumPy step on a CPU)."""
    return {name: lean.on_path(hf, "lean-torch") for name, (hf, _) in drafters.items()}


def drafter_inputs(world, d: Drafter, image, question) -> dict:
    """The drafter's own prefill inputs, as `Loaded.prompt` builds them for its kind."""
    target_inputs = world.prompt(image, question).target_inputs
    if d.kind == "image-aware":
        return world.prompt(image, question, "image-partly").drafter_inputs
    ids = [i for i in target_inputs["input_ids"][0].tolist() if d.feedable(i)]
    return {"input_ids": torch.tensor([ids])}


@pytest.mark.parametrize("step", ["lean + NumPy step", "lean"])
@pytest.mark.parametrize("name", ["text-partly", "image-partly", "qwen2"])
@torch.inference_mode()  # as the engine drafts
def test_lean_logits_match_transformers_over_many_steps_with_rollbacks(
    world, drafters, torch_steps, name, step, monkeypatch
):
    monkeypatch.setattr(lean_lm, "CHUNK", 32)  # small capacity steps: the cache grows several times
    hf, fast = drafters[name]
    fast = fast if step == "lean + NumPy step" else torch_steps[name]
    assert fast.path == step and fast.fallback_reason is None
    image, question = CASES[3]
    inputs = drafter_inputs(world, hf, image, question)
    ref, got = hf.start(inputs), fast.start(inputs)
    assert isinstance(got.cache, StaticCache) and type(ref) is DraftState
    first_capacity = got.cache.capacity
    g = torch.Generator().manual_seed(7)
    ids = fast.allowed.nonzero()[:, 0]
    steps = rollbacks = 0
    while got.cache.get_seq_length() < first_capacity + 70:  # past the first capacity: the cache grows
        n = 1 + int(torch.randint(2, (1,), generator=g))  # a draft step (1) or a catch-up (2)
        feed = ids[torch.randint(len(ids), (n,), generator=g)]  # ids on the device, as the engine feeds them
        torch.testing.assert_close(got._forward(feed), ref._forward(feed), rtol=1e-4, atol=1e-4)
        steps += 1
        if torch.rand(1, generator=g) < 0.3:  # reject some drafts: both caches forget the same tokens
            k = 1 + int(torch.randint(min(3, ref.cache.get_seq_length()), (1,), generator=g))
            ref.cache.crop(-k)
            got.cache.crop(-k)
            rollbacks += 1
        assert got.cache.get_seq_length() == ref.cache.get_seq_length()
    assert got.cache.capacity >= first_capacity + 3 * 32 and steps > 60 and rollbacks > 15
    length = got.cache.get_seq_length()
    for i, layer in enumerate(ref.cache.layers):  # what both caches hold, position by position
        torch.testing.assert_close(got.cache.keys[i, :, :length], layer.keys[0], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got.cache.values[i, :, :length], layer.values[0], rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def references(world):
    """The target's own greedy `generate` for every case."""
    return races.references(world, CASES)


def run(world, d: Drafter, image, question, gamma, sampling=GREEDY):
    prompt = speculative.Prompt(world.prompt(image, question).target_inputs, drafter_inputs(world, d, image, question))
    return speculative.run(world.target, prompt, drafter=d, gamma=gamma, sampling=sampling, max_new_tokens=MAX_NEW)


@pytest.mark.parametrize("gamma", [1, 4])
@pytest.mark.parametrize("name", ["text-partly", "image-partly", "qwen2"])
def test_greedy_speculative_output_with_lean_path_equals_autoregressive(world, drafters, references, name, gamma):
    hf, fast = drafters[name]
    accepted = 0
    for (image, question), reference in zip(CASES, references):
        trace = run(world, fast, image, question, gamma)
        autoregressive = speculative.run(
            world.target, world.prompt(image, question), sampling=GREEDY, max_new_tokens=MAX_NEW
        )
        assert list(trace.summary.token_ids) == list(autoregressive.summary.token_ids) == reference
        assert trace.start.drafter.path == "lean + NumPy step"
        # The lean drafter proposes what the transformers drafter proposes, round by round.
        assert [r.drafted_ids for r in trace.rounds] == [
            r.drafted_ids for r in run(world, hf, image, question, gamma).rounds
        ]
        accepted += sum(r.n_accepted for r in trace.rounds)
    if name != "qwen2":  # the world's partly-agreeing drafters get drafts accepted (random qwen2 need not)
        assert accepted > 0


@torch.inference_mode()  # as the engine drafts
def test_each_lean_draft_is_a_sample_of_the_q_it_returns(world, drafters):
    _, fast = drafters["text-partly"]
    image, question = CASES[1]
    state = fast.start(drafter_inputs(world, fast, image, question))
    answer = world.prompt(image, question).target_inputs["input_ids"][0, -3:].tolist()
    answer = [t for t in answer if fast.feedable(t)]
    sampling = Sampling(greedy=False, temperature=0.7, top_k=6, seed=0)
    generator = torch.Generator().manual_seed(0)
    counts, q_first = torch.zeros(fast.target_vocab_size), None
    n = 3000
    for _ in range(n):
        drafts, q = state.draft(answer, 1, sampling, generator)
        state.rollback(len(answer))  # forget the draft: every draw starts from the same state
        q_first = q[0] if q_first is None else q_first
        torch.testing.assert_close(q[0], q_first)  # the same state gives the same q every time
        counts[drafts[0]] += 1
    logits = fast.lean.forward(
        fast.lean.new_cache(64), drafter_inputs(world, fast, image, question)["input_ids"][0].tolist() + answer
    )
    expected = torch.zeros_like(q_first)
    expected[: fast.usable] = warp(logits.masked_fill(fast.blocked, float("-inf")), sampling)[: fast.usable]
    torch.testing.assert_close(q_first, expected, rtol=1e-4, atol=1e-5)
    assert int((q_first > 0).sum()) == 6  # top-k = 6
    assert counts[q_first == 0].sum() == 0  # never drafts outside the support of q
    total_variation = 0.5 * float((counts / n - q_first).abs().sum())
    assert total_variation < 0.04


@torch.inference_mode()  # as the engine drafts
def test_static_step_for_cuda_graphs_computes_the_eager_step(world, drafters):
    _, fast = drafters["image-partly"]
    assert fast.path == "lean + NumPy step"  # LeanLM built and checked
    lm: LeanLM = fast.lean
    ids = fast.allowed.nonzero()[:, 0][:40].tolist()
    eager, static = lm.new_cache(64), lm.new_cache(64)
    lm.forward(eager, ids[:20])
    lm.forward(static, ids[:20])
    keys_index = torch.arange(static.capacity)
    tables = lm.rope(static.capacity)
    for token in ids[20:]:
        position = torch.tensor([static.length])
        got = lm.static_step(static, torch.tensor([token]), position, keys_index, tables)
        static.length += 1
        torch.testing.assert_close(got, lm.forward(eager, [token]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(static.keys[:, :, : static.length], eager.keys[:, :, : eager.length])


def test_lean_forward_reads_the_transformers_modules_own_weights(drafters):
    hf, fast = drafters["qwen2"]  # q/k/v with biases
    assert fast.path == "lean + NumPy step"
    attn, mlp = hf.model.model.layers[0].self_attn, hf.model.model.layers[0].mlp
    (qkv_t, qkv_bias), _, _, (gate_up_t, _), (down_t, _) = fast.lean.layers[0][1:]
    # The fused q/k/v and gate/up matrices are the modules' storage: each module's weight is a view of them.
    assert attn.q_proj.weight.data_ptr() == qkv_t.data_ptr() and attn.q_proj.bias.data_ptr() == qkv_bias.data_ptr()
    assert attn.k_proj.weight.data_ptr() == qkv_t.data_ptr() + attn.q_proj.weight.numel() * qkv_t.element_size()
    assert (
        mlp.gate_proj.weight.data_ptr() == gate_up_t.data_ptr() and down_t.data_ptr() == mlp.down_proj.weight.data_ptr()
    )
    torch.testing.assert_close(qkv_t.t(), torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
    assert sum(p.numel() for p in hf.model.parameters()) == hf.n_params  # nothing added to the model


def test_fusing_the_weights_leaves_the_transformers_forward_unchanged(tok):
    model = qwen2(tok)
    ids = torch.arange(10, 30)[None]
    with torch.no_grad():
        before = model(input_ids=ids).logits
        LeanLM(model)
        assert torch.equal(model(input_ids=ids).logits, before)


def test_rotation_matrix_rotates_half_exactly():
    x = torch.randn(5, 3, 32)
    rotated = torch.cat((-x[..., 16:], x[..., :16]), dim=-1)  # transformers' rotate_half
    assert torch.equal(torch.matmul(x, lean_lm._rotation(32, x.dtype, x.device)), rotated)


def test_uncovered_architecture_drafts_through_transformers_and_says_so(world, tok, references):
    torch.manual_seed(5)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=512)).eval()
    blocked = world.drafter("text-partly").blocked_ids
    d = LeanDrafter(gpt2, name="gpt2", kind="text-only", blocked_ids=blocked, **races.verified_by(world))
    assert d.path == "transformers" and "architecture 'gpt2'" in d.fallback_reason
    for (image, question), reference in list(zip(CASES, references))[:3]:
        trace = run(world, d, image, question, 3)
        assert trace.start.drafter.path == "transformers"
        assert list(trace.summary.token_ids) == reference


def test_lean_path_that_fails_its_check_falls_back_to_transformers(world, drafters, references, monkeypatch):
    hf, _ = drafters["text-partly"]
    real = LeanLM.forward
    monkeypatch.setattr(LeanLM, "forward", lambda self, cache, ids: real(self, cache, ids) + 0.5)  # wrong logits
    d = lean.on_path(hf, "lean")
    assert d.path == "transformers" and "failed its check" in d.fallback_reason and d.lean is None
    image, question = CASES[0]
    trace = run(world, d, image, question, 4)
    assert trace.start.drafter.path == "transformers" and list(trace.summary.token_ids) == references[0]
    assert type(d.start(drafter_inputs(world, d, image, question))) is DraftState


def test_numpy_step_reads_the_lean_models_weights_and_the_runs_cache(world, drafters):
    _, fast = drafters["qwen2"]  # q/k/v with biases
    step = fast.numpy_step
    (qkv_t, qkv_bias), (o_t, _) = fast.lean.layers[0][1:3]
    (np_qkv_t, np_qkv_bias), (np_o_t, _) = step.layers[0][1:3]
    assert np.shares_memory(np_qkv_t, qkv_t.detach().numpy()) and np.shares_memory(
        np_qkv_bias, qkv_bias.detach().numpy()
    )
    assert np.shares_memory(np_o_t, o_t.detach().numpy()) and np.shares_memory(
        step.embed, fast.lean.embed.detach().numpy()
    )
    cache = fast.lean.new_cache(8)
    ids = fast.allowed.nonzero()[:, 0][:3].tolist()
    step.forward(cache, ids)  # written into the torch tensors that the torch step reads
    assert cache.length == 3 and bool(cache.keys[:, :, :3].abs().sum() > 0) and bool(cache.keys[:, :, 3:].eq(0).all())


def test_numpy_step_that_fails_its_check_steps_through_torch(world, drafters, references, monkeypatch):
    hf, _ = drafters["text-partly"]
    real = lean_steps.NumpyStep.forward
    monkeypatch.setattr(lean_steps.NumpyStep, "forward", lambda self, cache, ids: real(self, cache, ids) * 1.01)
    d = lean.on_path(hf, "lean")
    assert d.path == "lean" and d.numpy_step is None and "failed its check" in d.numpy_reason
    image, question = CASES[0]
    trace = run(world, d, image, question, 4)
    assert trace.start.drafter.path == "lean" and list(trace.summary.token_ids) == references[0]


def test_loaded_presets_draft_through_the_lean_path(tmp_path):
    tiny.save_preset(tmp_path, name="tiny-lean")
    loaded = loader.load("tiny-lean")
    for name in ("text-only", "image-aware"):
        d = loaded.drafter(name)
        assert isinstance(d, LeanDrafter) and d.path == "lean + NumPy step"
        assert not any("drafts through transformers" in note for note in loaded.notes(name))
    loader._LOADED.pop("tiny-lean")
    loader.PRESETS.pop("tiny-lean")
