"""The GPU check in its --smoke mode (tiny shapes on CPU); the full run needs a CUDA machine."""

import json

import pytest
import tiny_families
import torch

from demo.bench import gpu_check
from demo.engine import metrics
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
        expected = metrics.predicted_speedup(2.5, gamma, steps["t1_ms"], steps["verify_ms"][gamma], steps["draft_ms"])
        assert row["tau=2.5"] == (expected if gamma >= 2 else None)  # tau 2.5 needs at least 2 drafts
        assert row["break_even_tau"] * steps["t1_ms"] == pytest.approx(
            gamma * steps["draft_ms"] + steps["verify_ms"][gamma]
        )
    assert (
        sum(line.strip().startswith(str(g)) for g in gpu_check.GAMMAS for line in out[-len(gpu_check.GAMMAS) - 1 : -1])
        == 8
    )


def test_embedded_runs_compare_speculative_with_autoregressive(tmp_path, monkeypatch):
    preset = tiny_families.build("llava", tmp_path / "llava")
    monkeypatch.setitem(loader.PRESETS, preset.name, preset)
    try:
        runs = gpu_check.embedded_runs(gpu_check.SMOKE, preset=preset.name)
    finally:
        loader._LOADED.pop(preset.name, None)
    assert sorted(runs) == ["text gamma=2", "text gamma=4"]
    for run in runs.values():
        assert run["identical"] == "1/1"  # float32 on CPU: greedy SPD is exactly AR
        assert 1.0 <= run["tau"] <= 5.0 and run["spd_tok_s"] > 0 and run["ar_tok_s"] > 0
        assert run["speedup"] == run["spd_tok_s"] / run["ar_tok_s"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the full check would run")
def test_full_mode_needs_a_gpu():
    with pytest.raises(SystemExit):
        gpu_check.main([])
