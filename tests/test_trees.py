"""Token trees: the shape, the tree mask and per-node positions against chain forwards, the KV
rollback to the accepted path (target and drafter, both drafting paths), greedy output identical
to the target alone, the round's events, refusals, and the sampling law with a negative control."""

import embedded
import law
import pytest
import torch
from cycles import left_in_cycles, tensors
from races import CASES, GREEDY, MAX_NEW, spd

from demo.engine import metrics, trees
from demo.engine.events import TREE_SHAPE, TreeShape
from demo.engine.lean import on_path
from demo.engine.sampling import Sampling
from demo.engine.trees import TreeDrafter, draft_tree, keep_path, visibility


def test_the_default_shape_branches_twice_then_runs_in_chains():
    shape = TREE_SHAPE
    assert [shape.children(d) for d in (1, 2, 3, 8)] == [2, 2, 1, 1]
    assert [shape.nodes(g) for g in range(1, 9)] == [2, 6, 10, 14, 18, 22, 26, 30]
    assert TreeShape((3,)).nodes(3) == 9 and TreeShape((2, 3)).nodes(2) == 8


def test_visibility_lets_each_node_see_its_ancestors_and_itself():
    # root -> 0, 1; 0 -> 2; 1 -> 3; 2 -> 4
    seen = visibility([-1, -1, 0, 1, 2]).int().tolist()
    assert seen == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [1, 1, 0, 1, 0, 0],
        [1, 0, 1, 0, 1, 0],
        [1, 1, 0, 1, 0, 1],
    ]


def prefilled(world, case=0):
    image, question = CASES[case]
    inputs = world.prompt(image, question).target_inputs
    cache = world.target.new_cache()
    with torch.inference_mode():
        world.target.prefill(inputs, cache)
    return cache


PARENTS = [-1, -1, 0, 0, 1, 2, 4]  # two branches at depth 1, two children under node 0, chains
TOKENS = [40, 41, 42, 43, 44, 45, 46]


def depths_of(parents):
    depths = []
    for p in parents:
        depths.append(1 if p < 0 else depths[p] + 1)
    return depths


def path_to(node, parents):
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def test_one_tree_forward_scores_every_node_as_a_chain_forward_of_its_path(world):
    target, last = world.target, 30
    cache = prefilled(world)
    base = cache.get_seq_length()
    with torch.inference_mode():
        got = target.forward_tree([last] + TOKENS, [0] + depths_of(PARENTS), visibility(PARENTS), cache)
        for node in range(len(TOKENS)):
            chain = [last] + [TOKENS[i] for i in path_to(node, PARENTS)]
            cache.crop(-(cache.get_seq_length() - base))
            want = target.forward(chain, cache)
            torch.testing.assert_close(got[node + 1], want[-1], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", [[], [0], [1], [0, 3], [1, 4, 6], [0, 2, 5]])
def test_keeping_the_accepted_path_leaves_the_cache_a_chain_forward_would(world, path):
    target, last = world.target, 30
    tree_cache, chain_cache = prefilled(world), prefilled(world)
    base = tree_cache.get_seq_length()
    with torch.inference_mode():
        target.forward_tree([last] + TOKENS, [0] + depths_of(PARENTS), visibility(PARENTS), tree_cache)
        keep_path(tree_cache, base + 1, path, len(TOKENS))
        target.forward([last] + [TOKENS[i] for i in path], chain_cache)
        assert tree_cache.get_seq_length() == chain_cache.get_seq_length() == base + 1 + len(path)
        for a, b in zip(tree_cache.layers, chain_cache.layers):
            torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-5)
        # and the next forward reads it as it would read the chain's
        torch.testing.assert_close(
            target.forward([47, 48], tree_cache), target.forward([47, 48], chain_cache), rtol=1e-4, atol=1e-4
        )


@pytest.mark.parametrize("path", ["transformers", "lean", "lean-torch"])
@pytest.mark.parametrize("sampling", [GREEDY, Sampling(greedy=False, temperature=1.5)], ids=["greedy", "sampling"])
def test_drafting_a_tree_leaves_the_drafter_holding_the_answer_only(world, path, sampling):
    """After a tree, the drafter's next chain is the chain a fresh drafter drafts after the answer,
    on every drafting path (the lean ones step through LeanDraftState: `_forward` and `rollback`)."""
    drafter = on_path(world.drafter("text-partly"), path)
    assert drafter.path.startswith(path.split("-")[0]), drafter.fallback_reason
    image, question = CASES[2]
    inputs = world.prompt(image, question, "text-partly").drafter_inputs
    answer = [60, 61, 62]
    state, fresh = drafter.start(inputs), drafter.start(inputs)
    tree = draft_tree(state, answer, 4, TREE_SHAPE, sampling, torch.Generator().manual_seed(1))
    assert len(tree.tokens) == TREE_SHAPE.nodes(4)
    assert all(p < len(answer) for p in state.fed_positions) and state.consumed == len(answer)
    assert state.cache.get_seq_length() == fresh.cache.get_seq_length() + len(state.fed_positions)
    accepted = [tree.tokens[i] for i in path_to(tree.children[tree.children[-1][0]][0], tree.parents)]
    longer = answer + accepted + [63]
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    drafts, q = state.draft(longer, 3, GREEDY, g1)
    fresh_drafts, fresh_q = fresh.draft(longer, 3, GREEDY, g2)
    assert drafts == fresh_drafts
    torch.testing.assert_close(q, fresh_q, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sampling", [GREEDY, Sampling(greedy=False, temperature=1.5)], ids=["greedy", "sampling"])
def test_a_tree_race_leaves_no_reference_cycle_holding_a_tensor(world, sampling):
    # The drafting recursion once sat in its own closure with the drafter's state: every round
    # left the drafter's KV cache to Python's rare full collection.
    left = left_in_cycles(lambda: spd(world, "image-partly+tree", *CASES[1], 4, sampling=sampling))
    assert tensors(left) == []


def test_greedy_children_are_the_drafters_distinct_top_choices(world):
    drafter = world.drafter("image-partly")
    image, question = CASES[0]
    state = drafter.start(world.prompt(image, question, "image-partly").drafter_inputs)
    tree = draft_tree(state, [60], 3, TREE_SHAPE, GREEDY, torch.Generator())
    root = tree.children[-1]
    q = tree.q[-1]
    assert [tree.tokens[c] for c in root] == torch.topk(q, 2).indices.tolist()
    assert [len(tree.children.get(c, [])) for c in root] == [2, 2]
    assert sorted(tree.depths) == [1, 1, 2, 2, 2, 2, 3, 3, 3, 3]


@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("drafter", ["text-partly", "image-partly", "image-always", "text-never"])
def test_greedy_tree_output_identical_to_the_target_alone(world, answers, drafter, gamma):
    name = drafter + "+tree"
    for (image, question), reference in zip(CASES[:6], answers):
        trace = spd(world, name, image, question, gamma)
        assert trace.summary.token_ids == reference
        if drafter == "image-always":  # the target drafting for itself: every round accepts its deepest path
            full = [r.n_accepted == max(n.depth for n in r.tree.nodes) for r in trace.rounds if r.tree and not r.stop]
            assert all(full)


def test_a_tree_accepts_more_per_round_than_its_chain(world):
    chain = metrics.pooled([spd(world, "image-partly", im, q, 4) for im, q in CASES])
    tree = metrics.pooled([spd(world, "image-partly+tree", im, q, 4) for im, q in CASES])
    assert metrics.tau(tree) > metrics.tau(chain)


def test_a_tree_round_reports_its_nodes_path_and_walked_drafts(world):
    trace = spd(world, "text-partly+tree", *CASES[3], 4)
    assert trace.start.drafter.tree == TREE_SHAPE and trace.start.drafter.kind == "text-only"
    for r in trace.rounds:
        tree = r.tree
        assert tree is not None and len(tree.nodes) <= TREE_SHAPE.nodes(4)
        for i, node in enumerate(tree.nodes):
            assert node.parent < i
            assert node.depth == (1 if node.parent < 0 else tree.nodes[node.parent].depth + 1)
            assert node.accepted == (i in tree.path)
        # the path runs from depth 1 down, parent to child
        assert [tree.nodes[i].depth for i in tree.path] == list(range(1, len(tree.path) + 1))
        assert all(tree.nodes[b].parent == a for a, b in zip((-1,) + tree.path, tree.path))
        assert r.n_accepted == len(tree.path)
        assert r.drafted_ids[: r.n_accepted] == tuple(tree.nodes[i].token_id for i in tree.path)
        rejected = len(r.drafted_ids) - r.n_accepted
        assert rejected in (0, 1)
        if rejected:  # the first child of where the walk stopped
            stop_at = tree.path[-1] if tree.path else -1
            first = next(n for n in tree.nodes if n.parent == stop_at)
            assert r.drafted_ids[-1] == first.token_id
        kinds = [t.kind for t in trace.tokens if t.round == r.index]
        assert kinds[: r.n_accepted] == ["accepted"] * min(r.n_accepted, len(kinds))
        if r.stop is None:
            assert kinds[-1] == ("resampled" if rejected else "bonus")
        assert len(r.detail.positions) == len(r.drafted_ids)
    record = trace.rounds[0].to_dict()["tree"]
    assert set(record) == {"nodes", "path"} and set(record["nodes"][0]) == {
        "token_id",
        "text",
        "parent",
        "depth",
        "q",
        "accepted",
    }


def test_a_tree_too_large_for_one_verify_is_refused_before_any_work(world):
    image, question = CASES[0]
    name = "text-partly+tree"
    with pytest.raises(ValueError, match=r"34 nodes.*at most 32.*gamma 8 or less"):
        spd(world, name, image, question, 9, max_new=8)
    with pytest.raises(ValueError, match="chains only"):
        spd(world, name, image, question, 4, max_new=8, min_confidence=0.5)


def test_the_tree_option_wraps_the_loaded_drafter_without_a_copy(world):
    tree = world.drafter("image-partly+tree")
    assert isinstance(tree, TreeDrafter) and tree.base is world.drafter("image-partly")
    assert tree.model is tree.base.model and tree.n_params == tree.base.n_params


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["text-only+tree", "image-aware+tree"])
def test_greedy_trees_identical_on_every_task_family_gamma_and_budget(drafter):
    assert embedded.mismatches(drafter, range(1, 9), (1, 2, 5, 17, 128)) == []


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["exact", "no-residual-between-siblings"])
def test_tree_sampling_matches_the_target_law(tok, monkeypatch, broken):
    world = law.small_world(tok)
    if broken:  # negative control: every sibling judged against p, as if its elders were never tried
        monkeypatch.setattr(trees, "residual", lambda r, q: r)
    drafter = TreeDrafter(world.drafter, TREE_SHAPE, name="d+tree")
    n = law.BROKEN_RUNS if broken else law.RUNS[2]
    distance, bound, traces = law.law_distance(world, drafter, world.prompt, n=n, gamma=2)
    later = 0  # rounds whose path starts at a later sibling: the first child was tried and rejected
    for r in (r for t in traces for r in t.rounds if r.tree and r.tree.path):
        later += r.tree.path[0] != next(i for i, n in enumerate(r.tree.nodes) if n.parent == -1)
    assert later > 100
    assert (distance > bound) == broken, (distance, bound)


def test_the_gamma_sweep_replays_a_greedy_tree_race_round_for_round(world):
    from demo.engine.sweep import replay

    name = "image-partly+tree"
    for image, question in CASES[:4]:
        trace = spd(world, name, image, question, 3)
        point = replay(
            world.drafter(name),
            world.prompt(image, question, name).drafter_inputs,
            list(trace.summary.token_ids),
            gamma=3,
            max_new_tokens=MAX_NEW,
        )
        assert point.rounds == tuple((len(r.drafted_ids), r.n_accepted, r.n_emitted) for r in trace.rounds)
        assert point.tree_costs == tuple((metrics.drafter_steps(r), metrics.verify_width(r)) for r in trace.rounds)


def test_a_request_for_a_tree_too_large_or_adaptive_is_refused_when_parsed():
    from demo import session
    from demo.session.validate import InvalidInput

    ask = dict(question="What colour is the circle?", preset="embedded", drafter="text-only+tree")
    assert session.parse(**ask, gamma=8).drafter == "text-only+tree"
    with pytest.raises(InvalidInput, match=r"^A token tree of depth gamma = 9 has 34 nodes.*at most 32.*gamma 8"):
        session.parse(**ask, gamma=9)
    with pytest.raises(InvalidInput, match="applies to chains only"):
        session.parse(**ask, gamma=4, min_confidence=0.3)
    with pytest.raises(InvalidInput, match="'layer-skip' cannot run on preset 'llava-1.5-7b': no search"):
        session.parse(question="Hi?", preset="llava-1.5-7b", drafter="layer-skip")
