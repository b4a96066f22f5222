"""The heatmap section of a lane's panel, pure: what it shows first, its cells, and why none."""

from __future__ import annotations

import html
import json

from test_rejections import shapes_trace

from demo.engine.grounding import ImageAttention
from demo.page import heatmap, render


def read(trace, image: list[float]):
    n = len(image)
    maps = tuple(tuple(s if k == 4 else 0.0 for k in range(9)) for s in image)  # all on the centre cell
    trace.image_attention = ImageAttention((1,), 3, 3, tuple(image), (0.0,) * n, (0.0,) * n, maps)
    return trace


def test_the_section_shows_the_first_rejection_on_a_three_by_three_grid():
    trace = read(shapes_trace(), [0.1, 0.62] + [0.05] * 10)  # token 1, " red", rejected " blue"
    section = heatmap.section_html(trace)
    assert 'data-rows="3" data-cols="3" data-shown="1"' in section and "hm-cell" not in section  # drawn on the input
    maps = json.loads(html.unescape(section.split('data-maps="')[1].split('"')[0]))
    assert len(maps) == 12 and maps[1] == [0.0] * 4 + [0.62] + [0.0] * 4
    assert "drawn over the input image" in section and "layer 1;" in section
    assert "#1 &quot; red&quot; (the drafter&#x27;s &quot; blue&quot; rejected here): 62% of the target" in section
    assert heatmap.cell_style(0.62, 0.62) == "background:rgba(253,231,55,0.85)"  # cividis' top
    captions = json.loads(html.unescape(section.split('data-captions="')[1].split('"')[0]))
    assert len(captions) == 12 and captions[0] == '#0 "The": 10% of the target\'s attention on the image'
    assert 'data-index="1"' in render.panel_html(trace, "Speculative")  # the tokens say which map is theirs


def test_a_run_without_attention_shows_nothing_and_one_that_could_not_be_read_says_why():
    assert heatmap.section_html(shapes_trace()) == ""
    trace = shapes_trace()
    trace.image_attention = ImageAttention.missing(
        "There is no image in this question, so there is no attention on it to show."
    )
    assert heatmap.section_html(trace) == (
        '<div class="heatmap-note" role="note">No attention heatmap: There is no image in this question, '
        "so there is no attention on it to show.</div>"
    )


def test_a_token_that_looked_elsewhere_is_drawn_faint():
    assert heatmap.cell_style(0.001, 0.002) == "background:rgba(5,37,81,0.26)"  # under the 5% floor: dark and faint
    assert heatmap.colour(0.5) == (124, 123, 120)
