"""The speculator that looks at the prompt through the target's states, and its NumPy step.

`heads.Look` attends from the speculator's state to the prefill's rows (the image's positions and
the question's); `feature_steps.NumpySpeculator` computes the same step in NumPy with its affine
maps folded. These tests hold the two steps to each other, the look to the prompt, and the fast
greedy `propose` to the generic one, on seeded random weights (any weights: the engine's
exactness never depends on them).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from demo.engine import feature_steps, heads
from demo.engine.drafters import DraftState
from demo.engine.feature import SpeculatorDrafter
from demo.engine.sampling import Sampling

pytestmark = pytest.mark.fast

C, V = 32, 50


def speculator(look: int = 2, seed: int = 0) -> heads.Speculator:
    """A small speculator with every weight random (Look's output too, which starts at zero)."""
    torch.manual_seed(seed)
    net = heads.Speculator(C, 2 * C, 4, shared=True, look=look, look_dim=8)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 and p.shape[0] == C else 0.0))
    return net.eval().requires_grad_(False)


class TinyTarget(torch.nn.Module):
    """Just what a feature drafter reads from a target: tied input and output embeddings."""

    def __init__(self, seed: int = 1):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(V, C)
        self.embed.weight.data *= 0.05  # soft distributions: an adaptive chain has somewhere to stop

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.embed


def drafter(net: heads.Speculator) -> SpeculatorDrafter:
    return SpeculatorDrafter(net, TinyTarget(), name="feature", stop_ids=frozenset({0}), blocked_ids=frozenset({3}))


def test_an_untrained_look_is_the_identity():
    plain, looking = heads.Speculator(C, 2 * C, 4, shared=True), heads.Speculator(C, 2 * C, 4, shared=True, look=2)
    looking.stages.load_state_dict(plain.stages.state_dict())
    s, e, rows = torch.randn(C), torch.randn(C), torch.randn(5, C)
    torch.testing.assert_close(looking.step(0, s, e, looking.look.prepare(rows)), plain.step(0, s, e), rtol=0, atol=0)


def test_the_look_reads_the_prompt():
    net = speculator()
    s, e = torch.randn(C), torch.randn(C)
    a, b = (net.step(0, s, e, net.look.prepare(torch.randn(6, C))) for _ in range(2))
    assert (a - b).abs().max() > 1e-3  # another prompt, another state


def test_a_padded_batch_reads_each_prompt_as_alone():
    # training reads padded prompts side by side (a mask); each row's state is the one it has alone
    net = speculator()
    rows = [torch.randn(n, C) for n in (3, 6)]
    padded = torch.zeros(2, 6, C)
    for i, r in enumerate(rows):
        padded[i, : len(r)] = r
    mask = torch.arange(6) < torch.tensor([3, 6])[:, None]
    keys, values = net.look.prepare(padded)
    s, e = torch.randn(2, 4, C), torch.randn(2, 4, C)  # 4 states per prompt
    together = net.step(0, s.flatten(0, 1), e.flatten(0, 1), (keys, values, mask)).unflatten(0, (2, 4))
    for i, r in enumerate(rows):
        alone = torch.stack([net.step(0, s[i, j], e[i, j], net.look.prepare(r)) for j in range(4)])
        torch.testing.assert_close(together[i], alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("look", [0, 2], ids=["plain", "looking"])
@pytest.mark.parametrize("vocab", [None, (1, 2, 5, 7, 11, 40)], ids=["every id", "some ids"])
def test_the_numpy_step_computes_the_torch_step(look, vocab):
    net = speculator(look)
    if vocab:
        net.restrict(torch.tensor(vocab))
    d = drafter(net)
    assert d.numpy is not None  # it passed its check at load (`feature_steps.agrees`)
    rows, s, token = torch.randn(8, C), torch.randn(C), 7
    seen, seen_np = (net.look.prepare(rows), d.numpy.prepare(rows)) if look else (None, None)
    s_np = s.numpy()
    for k in range(5):  # a chain on its own states
        s = net.step(k, s, d.embed[token], seen)
        s_np, logits_np = d.numpy.step(k, s_np, token, seen_np)
        np.testing.assert_allclose(logits_np, d.logits(s).numpy(), rtol=1e-4, atol=1e-4)
        token = int(logits_np.argmax())


def test_a_restricted_speculator_drafts_only_its_ids_and_its_q_is_zero_elsewhere(tmp_path):
    net = speculator()
    net.restrict(torch.tensor([40, 1, 2, 5, 7, 11, 3]))  # 3 is blocked: never proposed anyway
    path = tmp_path / "drafter-feature.safetensors"
    heads.save(net, path)
    loaded = heads.load(path, C)
    assert loaded.vocab.dtype == torch.long and loaded.vocab.tolist() == [1, 2, 3, 5, 7, 11, 40]
    d = drafter(loaded)
    assert d.numpy is not None and np.shares_memory(d.numpy.E, d.E_rows.numpy())  # its rows of E, held once
    for fast in (True, False):
        state = d.start(None)
        state.observe(torch.randn(9, C))
        propose = state.propose if fast else lambda *a, **k: DraftState.propose(state, *a, **k)
        drafts, q = propose([5, 8], 6, Sampling(), torch.Generator())
        assert set(drafts.tolist()) <= {1, 2, 5, 7, 11, 40}
        assert q.shape == (6, V) and (q[:, [i for i in range(V) if i not in (1, 2, 5, 7, 11, 40)]] == 0).all()
        torch.testing.assert_close(q.sum(-1), torch.ones(6))


def test_a_numpy_step_that_disagrees_is_refused_and_the_torch_step_drafts(monkeypatch):
    net = speculator()
    good = drafter(net)
    assert good.numpy is not None and good.fallback_reason is None and good.path.startswith("NumPy")

    class Broken(feature_steps.NumpySpeculator):  # the negative control: one folded bias off
        def __init__(self, *a):
            super().__init__(*a)
            self.stages[0].down_bias = self.stages[0].down_bias + 0.5

    monkeypatch.setattr(feature_steps, "NumpySpeculator", Broken)
    bad = drafter(net)
    assert bad.numpy is None and "differ" in bad.fallback_reason and bad.path.startswith("torch")
    state = bad.start(None)
    state.observe(torch.randn(9, C))
    assert len(state.propose([5, 8], 4, Sampling(), torch.Generator())[0]) == 4  # it still drafts


def test_the_greedy_numpy_chain_proposes_what_the_generic_propose_does():
    d = drafter(speculator())
    prompt = torch.randn(9, C)
    states = []
    for fast in (True, False):
        state = d.start(None)
        state.observe(prompt)
        if fast:
            drafts, q = state.propose([5, 8], 6, Sampling(), torch.Generator())
        else:  # DraftState's own propose, through the same steps (catch_up / extend)
            drafts, q = DraftState.propose(state, [5, 8], 6, Sampling(), torch.Generator())
        states.append((drafts, q, len(state.states)))
    (fast_drafts, fast_q, fast_kept), (drafts, q, kept) = states
    assert fast_drafts.tolist() == drafts.tolist()
    assert 3 not in drafts.tolist()  # a blocked id is never proposed
    torch.testing.assert_close(fast_q, q, rtol=1e-5, atol=1e-6)
    assert fast_kept == kept == 6  # the states along the path, for the next round's rollback


def test_the_adaptive_numpy_chain_stops_where_the_generic_one_does():
    d = drafter(speculator(seed=3))
    prompt = torch.randn(9, C)
    lengths = []
    for fast in (True, False):
        state = d.start(None)
        state.observe(prompt)
        propose = state.propose if fast else lambda *a, **k: DraftState.propose(state, *a, **k)
        lengths.append(len(propose([5, 8], 8, Sampling(), torch.Generator(), min_confidence=0.5)[0]))
    assert lengths[0] == lengths[1] < 8


@pytest.mark.parametrize("scale", [0.01, 100.0], ids=["scores that exp keeps", "scores that overflow exp"])
def test_the_numpy_look_subtracts_each_heads_max_only_where_exp_could_overflow(scale):
    net = speculator()
    with torch.no_grad():
        net.look.q.weight.mul_(scale)
    d = drafter(net)
    assert d.numpy is not None
    rows, s, token = torch.randn(8, C), torch.randn(C), 7
    seen, seen_np = net.look.prepare(rows), d.numpy.prepare(rows)
    assert seen_np[3] == (scale > 1)  # `prepare`'s bound on the scores says whether to shift
    expected = d.logits(net.step(0, s, d.embed[token], seen)).numpy()
    _, logits = d.numpy.step(0, s.numpy(), token, seen_np)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    if scale > 1:  # the negative control: the same scores unshifted overflow, and the step is lost
        with np.errstate(over="ignore", invalid="ignore"):
            _, unshifted = d.numpy.step(0, s.numpy(), token, (*seen_np[:3], False))
        assert not np.isfinite(unshifted).all()
