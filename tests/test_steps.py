"""The drafter-step timing CLI on tiny models: every path is timed and the JSON line is last."""

import json

import tiny

from demo.lab.bench import steps
from demo.models import loader


def test_step_timings_cover_each_drafting_path_and_end_with_one_json_line(tmp_path, capsys):
    tiny.save_preset(tmp_path, name="tiny-steps")
    try:
        result = steps.main(["--preset", "tiny-steps", "--prompt-len", "12", "--repeats", "20"])
    finally:
        loader._LOADED.pop("tiny-steps", None)
        loader.PRESETS.pop("tiny-steps")
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    for timed in result["drafters"].values():
        assert set(timed) == {"transformers", "lean", "lean static", "lean numpy"}  # compiling only when asked
        assert all(0 < t["p10_ms"] <= t["median_ms"] for t in timed.values())
