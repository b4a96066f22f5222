"""The Analysis tab bins rejections by image dependence (issue 56): each example's answer is scored
with its image and with a blank one (`demo.models.ablation`), and each drafter's rejection rate is
shown where the answer token depends on the image and where it does not."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from demo.page import attention_view
from demo.page.analysis import view as analysis_view
from demo.session import image_rejections
from demo.session.rejections import Observation


def obs(index: int, accepted: bool, dependent: bool | None) -> Observation:
    base = Observation(0, index, index / 10, " w", "w", "colour", accepted, " w", "w")
    return replace(base, image_dependent=dependent)


def test_rejections_are_counted_where_the_token_depends_on_the_image_and_where_it_does_not():
    text_only = [
        obs(0, False, True),
        obs(1, False, True),
        obs(2, True, True),
        obs(3, True, False),
        obs(4, False, False),
    ]
    image_aware = [obs(0, True, True), obs(1, True, None)]  # position 1's ablation not read: left out
    rows = image_rejections.by_dependence({"text-only": text_only, "image-aware": image_aware})
    assert [(r["drafter"], r["dependent"], r["rejected"], r["drafted"]) for r in rows] == [
        ("text-only", True, 2, 3),
        ("text-only", False, 1, 2),
        ("image-aware", True, 0, 1),
        ("image-aware", False, 0, 0),
    ]
    assert rows[0]["rejection_rate"] == pytest.approx(2 / 3) and rows[3]["rejection_rate"] is None
    runs = [SimpleNamespace(drafter=d, obs=o) for d, o in (("text-only", text_only), ("image-aware", image_aware))]
    table = attention_view.dependence_html(SimpleNamespace(runs=runs, compared=lambda: runs))
    assert (
        '<tr><th>text-only</th><td>67% <span class="n">(2/3; 95% 21%–94%)</span></td><td>50% <span class="n">(1/2; 95% 9%–91%)</span></td>'
        in table
    )
    assert '<tr><th>image-aware</th><td>0% <span class="n">(0/1; 95% 0%–79%)</span></td><td>–</td></tr>' in table
    unread = [SimpleNamespace(drafter="text-only", obs=[obs(0, False, None)])]
    assert (
        attention_view.dependence_html(SimpleNamespace(runs=unread, compared=lambda: unread)) == ""
    )  # no ablation: no table


@pytest.mark.slow
def test_an_analysis_marks_the_colour_word_image_dependent_and_the_template_words_not():
    from demo.session.analysis import decode_examples
    from demo.session.race_events import Decoded

    items = analysis_view.examples_for("vqa_colour", 1, 0, ("en",))  # "... is orange in the picture."
    decoded = [
        s for s in decode_examples("embedded", ["text-only", "image-aware"], items, 4, 160) if isinstance(s, Decoded)
    ]
    assert [d.drafter for d in decoded] == ["text-only", "image-aware"]
    for d in decoded:
        by_category = {}
        for o in d.observations:
            by_category.setdefault(o.category, set()).add(o.image_dependent)
        assert by_category["colour"] == {True}, d.observations
        assert by_category["template"] == {False} and by_category["function"] == {False}
    # greedy: both drafters wrote the target's answer, so they share one reading, position by position
    assert [o.image_dependent for o in decoded[0].observations] == [o.image_dependent for o in decoded[1].observations]
