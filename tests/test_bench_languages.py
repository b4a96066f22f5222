"""The seed's table (`python -m demo.lab.bench --languages`) on tiny models: cells per language, drafter and gamma."""

import json

import pytest
import tiny

from demo.lab.bench import per_language
from demo.world.tasks import TASKS


def test_examples_in_a_language_take_each_task_kind_in_turn_on_the_same_scenes():
    en, zh = per_language.examples_in("en", 10, 0), per_language.examples_in("zh", 10, 0)
    assert [e.task for e in en[: len(TASKS)]] == list(TASKS)
    assert [e.scene for e in en] == [e.scene for e in zh]
    assert {e.language for e in zh} == {"zh"} and len(zh) == 10


def test_the_seed_table_has_a_row_per_drafter_and_gamma_and_bolds_the_best():
    def cell(language, drafter, gamma, speedup):
        return {"language": language, "drafter": drafter, "gamma": gamma, "speedup": speedup, "tau": 2.0}

    rows = [cell("en", "text-only", 2, 1.5), cell("en", "text-only", 4, 1.7), cell("zh", "text-only", 2, 0.9)]
    rows.append(cell("zh", "text-only", 4, 0.8))
    table = per_language.seed_table(rows).splitlines()
    assert table[0] == "| drafter | gamma | English | Chinese |"
    assert table[2] == "| text-only | 2 | 1.50x (tau 2.00) | **0.90x (tau 2.00)** |"
    assert table[3] == "| text-only | 4 | **1.70x (tau 2.00)** | 0.80x (tau 2.00) |"


@pytest.mark.slow
def test_language_cells_carry_their_language_and_count_lossless(tmp_path, capsys):
    tiny.save_preset(tmp_path / "preset", name="tiny-languages")
    argv = ["--languages", "en,de", "--preset", "tiny-languages", "--gammas", "1,3", "--n", "2"]
    per_language.main(argv + ["--max-new-tokens", "6", "--out", str(tmp_path / "out")])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    cells = line["cells"]
    assert len(cells) == 2 * 2 * 2  # languages x drafters x gammas
    assert [c["language"] for c in cells] == ["en"] * 4 + ["de"] * 4
    assert {c["drafter"] for c in cells} == {"text-only", "image-aware"}
    assert all(c["lossless"] == "2/2 identical" for c in cells)  # greedy SPD is the target's own answer
    saved = json.loads((tmp_path / "out" / "languages.json").read_text())
    assert [c["language"] for c in saved["cells"]] == [c["language"] for c in cells]
