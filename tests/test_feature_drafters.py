"""The drafters that read the target's hidden state (`feature`, `medusa`, `medusa+tree`) and the
staged drafter: the engine hands them the target's features from the forwards it runs anyway,
they are exact (greedy: the target's own answer; sampling: the target's law, with a control that
must fail), and the two paths where a draft with q(x) = 0 would break the law fail loudly.

The greedy sweep is the slow tier: every drafter on every task family in every language, with
gammas 1-8 spread over them (120 cells, a covering design rather than the 960-cell product); the
fast tier runs descriptions in each language at gammas 1, 4 and 8.
"""

from __future__ import annotations

import feature_world as fw
import law
import pytest
import torch
from embedded import embedded

from demo.engine import heads
from demo.engine.decoding import Target
from demo.engine.feature import FeatureDrafter, MedusaDrafter, MedusaState, SpeculatorDrafter
from demo.engine.sampling import Sampling, acceptance_probs, verify_sampled
from demo.engine.speculative import speculative_generate
from demo.engine.trees import Tree, verify_tree
from demo.world.tasks import LANGUAGES, TASKS

# --- the engine hands over the target's features ---------------------------------------------


@pytest.mark.parametrize("lean", [False, True], ids=["transformers", "lean"])
def test_the_verify_forward_returns_the_hidden_states_its_logits_were_read_from(lean):
    loaded = embedded()
    target = Target(loaded.target.model, loaded.target.tokenizer, name="t", stop_ids=loaded.target.stop_ids, lean=lean)
    assert target.path == ("lean" if lean else "transformers")
    cache = target.new_cache()
    inputs = fw.prompt("caption").target_inputs
    logits, features = target.prefill(inputs, cache, features=True)
    assert features.shape == (inputs["input_ids"].shape[1], 384)  # every prompt position, the image's included
    E = target.model.get_output_embeddings().weight.detach().float()
    torch.testing.assert_close(features[-1].float() @ E.T, logits.float(), rtol=1e-4, atol=1e-4)
    with torch.inference_mode():  # as a round runs it (the lean cache holds inference tensors)
        logits, features = target.forward([40, 41, 42], cache, features=True)
    assert features.shape == (3, 384)
    torch.testing.assert_close(features.float() @ E.T, logits.float(), rtol=1e-4, atol=1e-4)


def test_a_feature_round_costs_one_target_forward_and_hands_the_accepted_positions_to_the_next_propose(monkeypatch):
    calls, seen = [], []
    forward = Target.forward
    monkeypatch.setattr(Target, "forward", lambda self, *a, **k: calls.append(k) or forward(self, *a, **k))
    observe = MedusaState.observe
    monkeypatch.setattr(MedusaState, "observe", lambda self, f: seen.append(f.shape[0]) or observe(self, f))
    trace = fw.run("medusa", "description", "en", 4, 40)
    assert len(calls) == len(trace.rounds)  # one verify forward per round, nothing else
    prompt_rows = fw.prompt("description", "en").target_inputs["input_ids"].shape[1]
    # the prompt's rows with the first round, then each round's accepted rows with the next one
    assert seen == [prompt_rows] + [r.n_accepted + 1 for r in trace.rounds[:-1]]


def test_a_checkpoint_for_another_hidden_size_is_refused_at_load_with_a_sentence(tmp_path):
    path = tmp_path / "drafter-feature.safetensors"
    heads.save(heads.Speculator(256, 256, 1, shared=True), path)
    with pytest.raises(heads.MismatchedCheckpoint, match="size 256, but this target's are 384"):
        FeatureDrafter.load(path, embedded().target, name="feature")


# --- greedy: the target's own answer -------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
def test_greedy_runs_write_the_targets_own_answer(language):
    gammas = (1, 4, 8) if language == "en" else (4,)  # every gamma, task and language: the slow sweep below
    assert fw.mismatches(fw.NAMES, tasks=("description",), languages=(language,), gammas=gammas) == []


def covering_cells() -> list[tuple[str, str, str, int]]:
    """Every drafter on every task family in every language, once each, its gamma turning with the
    task: for a drafter and a language the eight task families take the eight gammas 1-8, so each
    drafter meets every gamma in every language and every task family, in 120 of the 960 cells."""
    return [
        (name, task, language, 1 + (t + 3 * l + 2 * d) % 8)
        for d, name in enumerate(fw.NAMES)
        for t, task in enumerate(TASKS)
        for l, language in enumerate(LANGUAGES)  # noqa: E741
    ]


def test_the_covering_cells_meet_every_drafter_task_language_and_gamma():
    cells = covering_cells()
    for name in fw.NAMES:
        for language in LANGUAGES:
            assert {g for n, _, lang, g in cells if n == name and lang == language} == set(range(1, 9))
        for task in TASKS:
            assert {lang for n, t, lang, _ in cells if n == name and t == task} == set(LANGUAGES)


@pytest.mark.slow
def test_greedy_runs_write_the_targets_own_answer_for_every_task_language_and_gamma():
    budget = 48
    wrong = [
        (name, task, language, gamma)
        for name, task, language, gamma in covering_cells()
        if fw.run(name, task, language, gamma, budget).summary.token_ids != fw.reference(task, language, budget)
    ]
    assert wrong == []


def test_staged_drafts_what_the_text_only_drafter_drafts_and_reports_both_stages():
    staged = fw.run("staged", "description", "en", 6, 60)
    loaded = embedded()
    plain = speculative_generate(
        loaded.target,
        loaded.drafter("text-only"),
        fw.prompt("description"),
        gamma=6,
        sampling=fw.GREEDY,
        max_new_tokens=60,
        generator=torch.Generator(),
    )
    plain = fw.Trace.of(plain)
    assert [r.drafted_ids for r in staged.rounds] == [r.drafted_ids for r in plain.rounds]
    guessed = sum(r.stages[0] for r in staged.rounds)
    confirmed = sum(r.stages[1] for r in staged.rounds)
    assert 0 < confirmed <= guessed  # the lookup stage guessed, and the drafter confirmed some
    assert all(r.stages is None for r in plain.rounds)


# --- sampling: the target's law ------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tok):
    return law.small_world(tok, layers=1)


def _heads(small, kind: str):
    t = small.target
    net = heads.Speculator(32, 64, 2, shared=False) if kind == "feature" else heads.MedusaHeads(32, 2)
    g = torch.Generator().manual_seed(0)  # its own generator: the global one's state depends on the tests run before
    with torch.no_grad():  # random, but far from uniform, so a wrong q shows
        for p in net.parameters():
            p.normal_(0, 0.5, generator=g)
    kind_of = SpeculatorDrafter if kind == "feature" else MedusaDrafter
    return kind_of(net, t.model, name=kind, stop_ids=t.stop_ids, blocked_ids=frozenset({0, 1, 2, 3}))


class _SampledFromArgmax(MedusaState):
    """A negative control: drafts the argmax of q but reports q itself, so q is not what it sampled from."""

    def propose(self, answer, n, sampling, generator, min_confidence=0.0, features=None):
        drafts, q = super().propose(answer, n, Sampling(), generator, features=features)
        if len(drafts) == 0:  # the token budget's last token: nothing drafted
            return drafts, q
        return drafts, torch.stack([self.q(self.rows[i], sampling) for i in range(len(drafts))])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["feature", "feature+tree", "medusa", "medusa+tree"])
def test_sampled_runs_follow_the_targets_law(small, kind):
    from demo.engine.trees import TreeDrafter

    drafter = _heads(small, kind.removesuffix("+tree"))
    drafter = TreeDrafter(drafter, name=kind) if kind.endswith("+tree") else drafter
    distance, bound, _ = law.law_distance(small, drafter, small.prompt, n=law.RUNS[1], gamma=2)
    assert distance < bound


@pytest.mark.slow
def test_heads_whose_q_is_not_what_they_sampled_from_break_the_law(small, monkeypatch):
    drafter = _heads(small, "medusa")
    monkeypatch.setattr(MedusaDrafter, "start", lambda self, inputs: _SampledFromArgmax(self))
    distance, bound, _ = law.law_distance(small, drafter, small.prompt, n=law.BROKEN_RUNS, gamma=2)
    assert distance > bound


# --- a draft with q(x) = 0 fails loudly ---------------------------------------------------------


def test_the_chain_rule_never_accepts_a_draft_with_q_zero_and_the_round_stops_with_a_sentence(small):
    p = torch.tensor([[0.1, 0.9], [0.5, 0.5]])
    q = torch.tensor([[1.0, 0.0]])
    drafts = torch.tensor([1])  # q(1) = 0: not drawn from q
    assert torch.isnan(acceptance_probs(p, q, drafts)).all()
    for seed in range(20):  # it was accepted with probability 1 before
        n_accepted, _ = verify_sampled(p, q, drafts, torch.Generator().manual_seed(seed))
        assert int(n_accepted) == 0

    class ZeroQ(MedusaState):
        def propose(self, answer, n, sampling, generator, min_confidence=0.0, features=None):
            drafts, q = super().propose(answer, n, sampling, generator, features=features)
            return drafts, q.scatter(1, drafts[:, None], 0.0)

    drafter = _heads(small, "medusa")
    drafter.start = lambda inputs: ZeroQ(drafter)
    with pytest.raises(ValueError, match=r"q\(x\) = 0"):
        law.law_distance(small, drafter, small.prompt, n=1, gamma=2)


def test_a_tree_child_with_q_zero_stops_the_walk_with_a_sentence(small):
    t = small.target
    cache = t.new_cache()
    t.prefill(small.prompt.target_inputs, cache)
    tree = Tree()
    tree.add(4, -1, 1)
    tree.q[-1] = torch.zeros(law.VOCAB)
    tree.q[-1][5] = 1.0  # the child, 4, has q = 0: it was not drawn from this q
    with pytest.raises(ValueError, match=r"q\(x\) = 0"):
        verify_tree(t, cache, 5, tree, law.SAMPLING, torch.Generator().manual_seed(0))
