"""The benchmark CLI end to end on tiny models: its table, files and final JSON line."""

import json
import math
import sys

import pytest
import tiny
import torch
from races import CASES, MAX_NEW, spd

import demo.lab.bench
from demo.engine.decoding import Target
from demo.lab.bench import benchmark, peer
from demo.lab.bench.cells import Cell, ForwardTime, iqr
from demo.models import loader
from demo.world.tasks import heldout_examples


@pytest.fixture(scope="module")
def tiny_preset(tmp_path_factory):
    return tiny.save_preset(tmp_path_factory.mktemp("preset"), name="tiny-bench")


@pytest.mark.slow
def test_bench_writes_report_files_and_ends_with_one_json_line(tiny_preset, tmp_path, capsys):
    out = tmp_path / "bench"
    benchmark.main(
        [
            "--preset",
            "tiny-bench",
            "--tasks",
            "caption,vqa",
            "--gammas",
            "1,3",
            "--drafter-paths",
            "lean,transformers",
            "--n",
            "2",
            "--max-new-tokens",
            "10",
            "--peer-gamma",
            "3",
            "--peer-reps",
            "1",
            "--out",
            str(out),
        ]
    )
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    cells = result["cells"]
    assert len(cells) == 2 * 2 * 2 * 2 * 2  # tasks x decodings x drafters x gammas x drafter paths
    assert list(cells[0]) == list(benchmark.LINE_KEYS)  # the fields the line declares, in order; values below
    assert [c["drafter_path"] for c in cells[:2]] == ["lean + NumPy step", "transformers"]  # side by side, per cell
    for cell in cells:
        assert 1.0 <= cell["tau"] <= cell["gamma"] + 1
        assert cell["speedup"] == pytest.approx(cell["tok_s_spd"] / cell["tok_s_ar"])
        assert cell["t1_ms"] > 0 and cell["t_verify_ms"] > 0 and cell["d_ms"] > 0
        assert all(math.isfinite(cell[k]) for k in ("t1_iqr_ms", "t_verify_iqr_ms", "d_iqr_ms"))
        assert cell["overhead_ms_per_round"] > 0 and cell["overhead_ms_per_step_ar"] > 0
        assert cell["limit_speedup"] == pytest.approx(cell["tau"] * cell["t1_ms"] / cell["t_verify_ms"])
        if cell["decoding"] == "greedy":
            assert cell["lossless"] == "2/2 identical"
    assert result["peer"]["ar_vs_hf_generate"] > 0
    assert {"ar_vs_hf_generate", "spd_vs_hf_assisted"} <= set(result["peer"])
    by_drafter = result["peer"]["by_drafter"]["text-only"]
    assert by_drafter["drafter_path"] == "lean + NumPy step" and by_drafter["lean_vs_transformers_path"] > 0
    # No description cell ran, so the step-cost goals say so; the peer ones are measured.
    assert result["goals"]["D / T1"] == {"value": None, "bar": "<= 0.05", "met": None}
    assert result["goals"]["AR / HF generate"]["value"] == result["peer"]["ar_vs_hf_generate"]
    quartiles = result["image_attention_quartiles"]  # read after the greedy runs at the last gamma
    assert [(q["language"], q["drafter"]) for q in quartiles] == [("en", d) for d in ("text-only", "image-aware")]
    for q in quartiles:
        assert q["observations"] > 0 and q["per_quartile"] == q["observations"] // 4
        assert q["bottom_max_share"] <= q["top_min_share"]
    assert any("bottom quartile: share ≤, rejected" in line for line in lines)  # the printed table
    for name in ("report.html", "cells.csv", "analysis.csv", "bench.json"):
        assert (out / name).stat().st_size > 0
    page = (out / "report.html").read_text()
    assert "Block efficiency tau" in page and "Plotly" in page and "Where the time goes" in page


@pytest.mark.slow
def test_bench_all_drafters_names_every_cell_and_counts_greedy_lossless(tiny_preset, tmp_path, capsys):
    args = "--tasks caption --gammas 2 --decoding greedy --n 1 --max-new-tokens 12 --no-peer --drafters all"
    benchmark.main([*args.split(), "--preset", "tiny-bench", "--out", str(tmp_path / "bench")])
    cells = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cells"]
    names = ["text-only", "text-only+tree", "image-aware", "image-aware+tree", "prompt-lookup", "staged"]
    # the tiny preset stores no layer-skip search nor feature checkpoints; it has a text-only drafter to stage
    assert [c["drafter"] for c in cells] == names
    assert all(c["lossless"] == "1/1 identical" for c in cells)


def cell(**fields) -> Cell:
    base = dict(task="description", drafter="text-only", drafter_path="lean", gamma=4, decoding="greedy", n=3)
    base.update(tau=3.75, alpha=0.7, acceptance_by_position=[], mbsu=3.0, tok_s_spd=300.0, tok_s_ar=100.0)
    base.update(speedup=3.0, t1_ms=6.0, t_verify_ms=7.5, d_ms=0.24, limit_speedup=3.0, predicted_speedup=2.9)
    base.update(verify_tokens=5.0, drafter_steps=4.0)
    base.update(draft_share=0.1, lossless="3/3 identical", correct_spd=3, correct_ar=3)
    base.update(
        t1_iqr_ms=0.3, t_verify_iqr_ms=0.4, d_iqr_ms=0.01, overhead_ms_per_round=1.5, overhead_ms_per_step_ar=0.5
    )
    base.update(fields)
    return Cell(**base)


def test_goals_read_the_lean_description_cell_at_gamma_4_and_the_peer_block():
    cells = [
        cell(drafter_path="transformers", d_ms=0.96),  # the comparison cell is not the one judged
        cell(gamma=2, d_ms=5.0),
        cell(drafter="image-aware", d_ms=1.0),
        cell(speedup=2.4),  # text-only, lean, description, gamma 4, greedy: this one
    ]
    peer = {
        "text-only": {
            "drafter": "text-only",
            "drafter_path": "lean",
            "spd_vs_hf_assisted": 1.7,
            "ar_vs_hf_generate": 1.02,
        }
    }
    rows = {g["goal"]: g for g in benchmark.goals(cells, peer)}
    assert rows["D / T1"]["value"] == pytest.approx(0.04) and rows["D / T1"]["met"] is True
    assert (
        rows["speedup / limit_speedup"]["value"] == pytest.approx(0.8)
        and rows["speedup / limit_speedup"]["met"] is False
    )
    assert rows["SPD / HF assisted"]["met"] is False and rows["AR / HF generate"]["met"] is True
    assert rows["D / T1"]["from"] == "description, text-only, gamma 4, greedy, lean"
    assert all(g["value"] is None and g["met"] is None for g in benchmark.goals([], None))


def test_a_drafter_with_a_smaller_vocabulary_goes_to_assisted_generation_widened_and_drafts_the_same():
    loaded = loader.load("embedded")
    d = loaded.drafter("text-only")
    assert d.usable < d.target_vocab_size  # the English drafter beside the trilingual target
    wide = peer.widened(d)
    assert wide.config.get_text_config().vocab_size == d.target_vocab_size
    assert d.model.get_output_embeddings().weight.shape[0] == d.usable  # the drafter itself is untouched
    lacked = d.target_vocab_size - 1
    with torch.inference_mode():
        ours = d.model(input_ids=torch.tensor([[3, 10, 20, 0, 4]])).logits[0, -1]
        theirs = wide(input_ids=torch.tensor([[3, 10, 20, lacked, 4]])).logits[0, -1]  # an id it lacks reads as <unk>
    allowed = d.allowed[: d.usable]
    assert torch.equal(ours[allowed], theirs[: d.usable][allowed])
    never = torch.ones(d.target_vocab_size, dtype=torch.bool)
    never[: d.usable] = ~allowed
    assert theirs[never].max() < theirs[~never].min()  # ids it lacks or may not propose: never drafted
    ex = heldout_examples("caption", 1, seed=0)[0]
    prompt = loaded.prompt(ex.image, ex.question, "text-only")
    generate = dict(max_new_tokens=24, do_sample=False, eos_token_id=sorted(loaded.target.stop_ids))
    alone = loaded.target.model.generate(**prompt.target_inputs, **generate)
    assisted = loaded.target.model.generate(**prompt.target_inputs, **generate, assistant_model=wide)
    assert torch.equal(alone, assisted)  # transformers takes the pairing now, and stays exact


def test_bench_json_is_written_before_the_report_and_without_plotly(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "demo.lab.bench.report", None)  # as on a machine without plotly
    monkeypatch.delattr(demo.lab.bench, "report", raising=False)  # imported by an earlier test: forget it here too
    written = benchmark.write_outputs(tmp_path, [cell()], None, {}, {"preset": "p"}, [])
    assert written == ["cells.csv", "analysis.csv", "bench.json"] and not (tmp_path / "report.html").exists()
    assert json.loads((tmp_path / "bench.json").read_text())["cells"][0]["overhead_ms_per_round"] == 1.5
    assert capsys.readouterr().out.startswith("no report.html: ")


def test_iqr_is_the_spread_of_the_middle_half():
    assert iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == 2.0  # quartiles 2 and 4
    assert iqr([7.0]) == 0.0


def test_forward_time_counts_each_forward_of_a_run_and_only_inside_the_block(world):
    """Every target forward (one per round) and every drafter step (catch-up, then each draft fed
    back) is counted once; the methods are themselves again after the block."""
    image, question = CASES[1]
    meter = ForwardTime()
    with meter.active():
        trace = spd(world, "text-partly", image, question, gamma=3, max_new=MAX_NEW)
    answer = 1  # the prefill's token
    expected = 0
    for r in trace.rounds:
        n_draft = min(3, MAX_NEW - answer - 1)
        expected += 1 + n_draft  # the verify, and the drafter's catch-up plus n_draft - 1 drafts fed back
        answer += r.n_emitted
    assert meter.calls == expected
    assert 0 < meter.seconds < sum(r.draft_seconds + r.verify_seconds for r in trace.rounds)
    assert Target.forward is Target.__dict__["forward"] and "timed" not in Target.forward.__qualname__
    calls = meter.calls
    spd(world, "text-partly", image, question, gamma=3, max_new=MAX_NEW)
    assert meter.calls == calls
