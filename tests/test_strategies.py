"""The table of drafting strategies (demo.session.strategies): a greedy race's answer replayed at its
gamma with every drafter the preset offers, the race's own row exactly the race's numbers."""

from dataclasses import replace

import pytest
from races import CASES

from demo import session
from demo.engine import metrics, sweep
from demo.engine.sampling import Sampling
from demo.models.loader import Loaded
from demo.models.presets import LAYER_SKIP, PROMPT_LOOKUP, DrafterSpec, Preset
from demo.session import budget, gamma_sweep, strategies

GREEDY = Sampling()


@pytest.fixture(autouse=True)
def no_budget(monkeypatch):
    """The table's exactness does not depend on the budget (off, as on a local copy); the one test
    of the budget's cut sets its own."""
    monkeypatch.setenv(budget.BUDGET_ENV, "0")


@pytest.fixture(scope="module")
def offering(world):
    """The tiny world's target and two of its drafters, in a preset offering them, their trees, prompt
    lookup and layer-skip (of its layer 1): every kind of strategy."""
    preset = Preset(
        "tiny-strategies",
        "",
        (DrafterSpec("text-partly", "text-only", "unused"), DrafterSpec("image-partly", "image-aware", "unused")),
        skip_layers=(1,),
    )
    return Loaded(
        preset,
        world.target,
        world.processor,
        world.device,
        drafters=dict(world.drafters),
        drafter_processors=dict(world.drafter_processors),
    )


def request_for(drafter, gamma=3, sampling=GREEDY, min_confidence=0.0, question=CASES[0][1]):
    return session.Request(
        question=question,
        preset="tiny-strategies",
        drafter=drafter,
        gamma=gamma,
        sampling=sampling,
        max_new_tokens=24,
        min_confidence=min_confidence,
    )


def table(loaded, request, image=CASES[0][0], swept=False, tokens=None):
    """The race of `request`, then its table (with `swept`, given the γ sweep's points, as
    `gpu_race` gives them): (the race's traces, the names shown, the records)."""
    prompts = session.Prompts(loaded, request.question, image)
    traces = session.run_lanes(loaded, request, image, prompts=prompts)
    spd, ar = traces["speculative"], traces["autoregressive"]
    points = list(gamma_sweep.replays(request, prompts, spd, ar, tokens)) if swept else []
    shown, stream = [], strategies.compare(request, prompts, spd, ar, lambda name: name, points, tokens)
    while True:
        try:
            shown.append(next(stream))
        except StopIteration as done:
            return spd, shown, done.value


@pytest.mark.parametrize("drafter", ["text-partly", "image-partly+tree", PROMPT_LOOKUP, LAYER_SKIP])
def test_the_races_own_strategy_row_is_the_races_own_tau_and_alpha_exactly(offering, drafter):
    image, question = CASES[1]
    spd, _, rows = table(offering, request_for(drafter, question=question), image)
    [own] = [r for r in rows if r["raced"]]
    assert own["strategy"] == drafter and own["gamma"] == 3
    assert own["tau"] == metrics.tau(spd)  # the replay at the race's gamma makes the race's rounds
    assert own["alpha"] == pytest.approx(metrics.alpha(spd), abs=0, nan_ok=True)
    assert own["mbsu"] == pytest.approx(metrics.mbsu_made(spd), nan_ok=True)
    assert own["c"] == metrics.param_ratio(spd)


def test_every_offered_strategy_has_a_row_in_the_presets_order_each_shown_as_it_is_replayed(offering):
    _, shown, rows = table(offering, request_for("text-partly"))
    offered = list(offering.preset.drafter_names())
    assert offered == [
        "text-partly",
        "text-partly+tree",
        "image-partly",
        "image-partly+tree",
        PROMPT_LOOKUP,
        LAYER_SKIP,
        "staged",  # the text-only drafter, staged by lookup
    ]
    assert shown == offered and [r["strategy"] for r in rows] == offered
    assert all(r["left_out"] is None and r["tau"] >= 1 and r["predicted_speedup"] > 0 for r in rows)
    c = {r["strategy"]: r["c"] for r in rows}
    assert c[PROMPT_LOOKUP] == 0 and c["text-partly"] == c["text-partly+tree"] > 0
    assert c[LAYER_SKIP] == offering.drafter(LAYER_SKIP).n_params / offering.target.n_params  # the layers it runs
    assert all(r["draft_ms"] > 0 for r in rows if r["alpha"] == r["alpha"])  # each that drafted was timed


def test_the_table_processes_the_image_once_for_the_target_and_once_per_drafter_that_reads_it(offering, monkeypatch):
    image, question = CASES[0]
    request = request_for("text-partly")
    traces = session.run_lanes(offering, request, image)
    made = []
    inputs = Loaded._inputs
    monkeypatch.setattr(
        Loaded, "_inputs", lambda self, processor, *a: made.append(processor) or inputs(self, processor, *a)
    )
    prompts = session.Prompts(offering, question, image)
    rows = list(strategies.compare(request, prompts, traces["speculative"], traces["autoregressive"], str))
    assert len(rows) == 7  # staged reads the text-only drafter's prompt: no image processing of its own
    # the target's inputs once, then the image-aware drafter's own once, for it and its tree (6 + 2
    # calls before the table shared the target's, 3 before its tree shared its drafter's)
    assert made == [offering.processor, offering.drafter_processors["image-partly"]]


def test_a_strategy_that_cannot_be_replayed_is_left_out_with_the_reason_and_the_others_stay(offering, monkeypatch):
    # adaptive drafting: the trees are refused, as a race of them would be
    _, shown, rows = table(offering, request_for("text-partly", min_confidence=0.3))
    left_out = {r["strategy"]: r["left_out"] for r in rows if r["left_out"]}
    assert set(left_out) == {"text-partly+tree", "image-partly+tree"} and shown == list(offering.preset.drafter_names())
    assert all("chains only" in why for why in left_out.values())
    assert all(r[key] is None for r in rows if r["left_out"] for key in strategies.NUMBERS)
    # a replay that fails, and a model whose files are not here (the table never downloads)
    replay = sweep.replay

    def failing(drafter, *args, **kwargs):
        if drafter.name == PROMPT_LOOKUP:
            raise RuntimeError("no lookup today\nsecond line")
        return replay(drafter, *args, **kwargs)

    monkeypatch.setattr(sweep, "replay", failing)
    missing = DrafterSpec("missing", "text-only", "/nowhere/drafter")
    monkeypatch.setattr(offering, "preset", Preset("p", "", (*offering.preset.drafters, missing), skip_layers=(1,)))
    _, _, rows = table(offering, request_for("text-partly"))
    left_out = {r["strategy"]: r["left_out"] for r in rows if r["left_out"]}
    assert left_out == {
        PROMPT_LOOKUP: "its replay failed (no lookup today)",
        "missing": "its model's files are not on this machine (race it once to fetch them)",
        "missing+tree": "its model's files are not on this machine (race it once to fetch them)",
    }
    assert "missing" not in offering.drafters  # nothing was loaded for it


def test_a_sampling_race_has_no_table(offering):
    sampled = request_for("text-partly", sampling=Sampling(greedy=False, temperature=0.8, top_p=0.95, seed=1))
    assert table(offering, sampled)[1:] == ([], [])


def test_a_table_with_no_room_beside_a_shortened_race_leaves_every_row_out_and_one_with_some_replays_that_many(
    offering,
):
    request = request_for("text-partly")
    spd, shown, rows = table(offering, request, tokens=0)
    assert shown == [] and [r["strategy"] for r in rows] == list(offering.preset.drafter_names())
    assert {r["left_out"] for r in rows} == {strategies.OVER_BUDGET}
    _, shown, rows = table(offering, request, tokens=4)  # the first 4 tokens: the rows of a race of 4 (greedy)
    assert shown == list(offering.preset.drafter_names())
    short, _, whole = table(offering, replace(request, max_new_tokens=4))
    assert [r["tau"] for r in rows] == [r["tau"] for r in whole] and whole[0]["tau"] is not None


def test_the_races_own_row_reuses_the_sweeps_replay_at_its_gamma_and_reads_the_same(offering, monkeypatch):
    request = request_for("image-partly")
    _, _, replayed = table(offering, request)
    calls, replay = [], sweep.replay
    monkeypatch.setattr(
        sweep, "replay", lambda drafter, *a, **k: calls.append(drafter.name) or replay(drafter, *a, **k)
    )
    _, shown, reused = table(offering, request, swept=True)
    assert calls.count("image-partly") == len(sweep.GAMMAS)  # the sweep's ten; the table adds none
    assert shown == list(offering.preset.drafter_names())  # still announced in turn
    numbers = ("strategy", "raced", "tau", "alpha", "mbsu", "c", "left_out")
    assert [{k: r[k] for k in numbers} for r in reused] == [{k: r[k] for k in numbers} for r in replayed]


def test_the_drafters_that_read_the_targets_features_get_rows_and_the_races_own_is_its_numbers():
    # the embedded world offers feature, medusa and medusa+tree: their replays read the target's
    # hidden states behind the race's answer (one target forward, made once for all three)
    import feature_world as fw
    from embedded import embedded

    loaded, example = embedded(), fw.example("description")
    request = session.parse(question=example.question, preset=loaded.preset.name, drafter="feature", max_new_tokens=24)
    spd, _, rows = table(loaded, request, example.image, swept=True)
    by_name = {r["strategy"]: r for r in rows}
    for name in ("feature", "medusa", "medusa+tree"):
        assert by_name[name]["left_out"] is None and by_name[name]["tau"] >= 1, name
    assert by_name["feature"]["raced"] and by_name["feature"]["tau"] == metrics.tau(spd)
