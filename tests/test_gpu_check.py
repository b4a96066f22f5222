"""The GPU check in its --smoke mode (tiny shapes on CPU; the full run needs a CUDA machine) and the
step-cost bench it reads."""

import json
import math

import pytest
import tiny_families
import torch

from demo.lab.bench import gpu_check, step_costs
from demo.models import loader


@pytest.fixture
def no_embedded(monkeypatch, tmp_path):
    drafter = loader.DrafterSpec("d", "text-only", str(tmp_path / "drafter"))
    missing = loader.Preset("embedded", str(tmp_path / "target"), (drafter,))
    monkeypatch.setitem(loader.PRESETS, "embedded", missing)
    monkeypatch.delitem(loader._LOADED, "embedded", raising=False)  # loaded by an earlier test: forget it here


def test_smoke_mode_prints_a_table_and_ends_with_one_json_line(no_embedded, capsys):
    report = gpu_check.main(["--smoke"])
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[-1]) == json.loads(json.dumps(report))
    assert out[0].startswith(f"GPU check {report['date']}  device: ") and "(SMOKE: tiny shapes)" in out[0]
    missing = loader.PRESETS["embedded"]
    assert report["embedded"] == {"skipped": f"Model files missing: {missing.target}, {missing.drafters[0].path}."}
    steps = report["steps"]
    assert steps["image_tokens"] == 16 and steps["context"] == 1 + 16 + 8 + 8
    assert sorted(steps["verify_ms"]) == list(gpu_check.GAMMAS) and steps["t1_ms"] > 0 and steps["draft_ms"] > 0
    for gamma, row in report["predicted"].items():
        expected = 2.5 * steps["t1_ms"] / (gamma * steps["draft_ms"] + steps["verify_ms"][gamma])
        assert row["tau=2.5"] == (expected if gamma >= 2 else None)  # tau 2.5 needs at least 2 drafts
        assert row["break_even_tau"] * steps["t1_ms"] == pytest.approx(
            gamma * steps["draft_ms"] + steps["verify_ms"][gamma]
        )
    part3 = next(i for i, line in enumerate(out) if line.startswith("3. predicted")) + 2  # after its header
    assert sum(line.strip().startswith(str(g)) for g in gpu_check.GAMMAS for line in out[part3 : part3 + 8]) == 8
    # 4. the 7B-shaped race and the goals, from this run; "not measured" where a figure is absent.
    race = report["race_7b"]
    assert race["ar_vs_generate"] == pytest.approx(
        race["ms_per_token"]["hf_generate"] / race["ms_per_token"]["ours_ar"]
    )
    assert set(race["identical"]) == {"ours_ar = generate", "ours_spd = assisted", "ours_spd = ours_ar"}
    assert race["identical"]["ours_ar = generate"] == "2/2"  # float32 on a CPU: our greedy AR is generate's
    assert race["identical"]["ours_spd = ours_ar"] == "2/2" and race["syncs_per_round"] is None
    goals = {g["goal"]: g for g in report["goals"]}
    assert len(goals) == 8 and goals["our AR / generate"]["value"] == race["ar_vs_generate"]
    assert goals["embedded SPD/AR, text-only"]["value"] is None  # the embedded world was not built here
    assert goals["7B shape: lean target T1 (ms)"]["value"] is None and goals["host syncs per round"]["value"] is None
    table = out[out.index("GPU goals") + 2 : -1]
    assert len(table) == 8 and sum("not measured" in line for line in table) == 6


def test_embedded_runs_compare_speculative_with_autoregressive(tmp_path, monkeypatch):
    preset = tiny_families.build("llava", tmp_path / "llava")
    monkeypatch.setitem(loader.PRESETS, preset.name, preset)
    try:
        runs = gpu_check.embedded_runs(gpu_check.SMOKE, preset=preset.name)
    finally:
        loader._LOADED.pop(preset.name, None)
    names = preset.drafter_names()  # every drafter the preset offers, at gamma 2 and 4
    assert "text" in names and len(names) > 1
    assert sorted(runs) == sorted(f"{name} gamma={gamma}" for name in names for gamma in (2, 4))
    for key, run in runs.items():
        gamma = int(key.rpartition("gamma=")[2])
        assert run["identical"] == "1/1"  # float32 on CPU: greedy SPD is exactly AR
        assert 1.0 <= run["tau"] <= gamma + 1 and run["spd_tok_s"] > 0 and run["ar_tok_s"] > 0
        assert run["alpha"] is None or 0.0 <= run["alpha"] <= 1.0
        # the spreads are shares of a median of real step times: finite, and a model drafter's is measured
        assert math.isfinite(run["t1_iqr_share"])
        model = run["drafter_path"] != "n-gram lookup"
        assert not model or (run["d_iqr_share"] is not None and math.isfinite(run["d_iqr_share"]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the full check would run")
def test_full_mode_needs_a_gpu():
    with pytest.raises(SystemExit):
        gpu_check.main([])


def test_the_step_cost_bench_prints_one_json_line_over_the_rows_asked_for(capsys):
    """Tiny shapes, two repeats: every path but the compiled one (minutes of compiling) names its
    figures or why it cannot run here; the lean paths compute transformers' logits."""
    result = step_costs.main(["--rows", "target/*/tiny", "drafter/[!c]*/tiny", "--device", "cuda"] + ["--repeats", "2"])
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == json.loads(json.dumps(result))
    rows = result["rows"]
    assert sorted(rows) == sorted(r for r in step_costs.ROWS if r.endswith("/tiny") and "compiled" not in r)
    cuda = torch.cuda.is_available()
    assert result["device"] != "cpu (no CUDA here)" if cuda else result["device"] == "cpu (no CUDA here)"
    for path in step_costs.TARGET_PATHS:
        [target] = rows[f"target/{path}/tiny"].values()
        assert target["path"].startswith(path) and target["context"] == 1 + 16 + 8 + 8
        assert sorted(target["ms"]) == [1, step_costs.GAMMA + 1] and target["ms"][1]["median_ms"] > 0
    for path in ("transformers", "lean", "static", "numpy") + (("graphs",) if cuda else ()):
        [drafter] = rows[f"drafter/{path}/tiny"].values()
        assert drafter["median_ms"] >= drafter["p10_ms"] > 0 and drafter["max_abs_logit_diff"] < 1e-4
    assert cuda or rows["drafter/graphs/tiny"] == {"llama tiny shape": {"error": "no CUDA device"}}
    with pytest.raises(SystemExit):
        step_costs.main(["--rows", "nothing/*"])
