"""The benchmark CLI end to end on tiny models: its table, files and final JSON line."""

import json

import pytest
import tiny

from demo.bench import benchmark


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
    assert len(cells) == 2 * 2 * 2 * 2  # tasks x decodings x drafters x gammas
    assert set(cells[0]) == {
        "task",
        "drafter",
        "gamma",
        "decoding",
        "tau",
        "alpha",
        "mbsu",
        "tok_s_spd",
        "tok_s_ar",
        "speedup",
        "lossless",
    }
    for cell in cells:
        assert 1.0 <= cell["tau"] <= cell["gamma"] + 1
        assert cell["speedup"] == pytest.approx(cell["tok_s_spd"] / cell["tok_s_ar"])
        if cell["decoding"] == "greedy":
            assert cell["lossless"] == "2/2 identical"
    assert result["peer"]["ar_vs_hf_generate"] > 0
    assert {"ar_vs_hf_generate", "spd_vs_hf_assisted"} <= set(result["peer"])
    for name in ("report.html", "cells.csv", "analysis.csv", "bench.json"):
        assert (out / name).stat().st_size > 0
    page = (out / "report.html").read_text()
    assert "Block efficiency tau" in page and "Plotly" in page
