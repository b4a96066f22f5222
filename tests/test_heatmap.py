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
    assert "outlined on the copy of the image beside the tokens" in section and "layer 1;" in section
    assert "#1 &quot; red&quot; (the drafter&#x27;s &quot; blue&quot; rejected here): 62% of the target" in section
    # the peak cell outlined at its widest, dark inside light: the shapes under it keep their colours
    assert (
        heatmap.cell_style(0.62, 0.62)
        == "box-shadow:inset 0 0 0 4px rgba(0,0,0,.9),inset 0 0 0 5px rgba(255,255,255,.9)"
    )
    assert "background" not in heatmap.cell_style(0.2, 0.62) + heatmap.cell_style(0.62, 0.62)
    captions = json.loads(html.unescape(section.split('data-captions="')[1].split('"')[0]))
    assert len(captions) == 12 and captions[0] == '#0 "The": 10% of the target\'s attention on the image'
    panel = render.panel_html(trace, "Speculative")
    assert 'data-index="1"' in panel  # the tokens say which map is theirs
    # the copy of the image sits beside the tokens, in the same row, not a page away
    assert '<div class="panel-body"><div class="tokens">' in panel and '<figure class="hm-figure"' in panel
    assert panel.index("hm-figure") < panel.index('<div class="heatmap"')


def test_a_run_without_attention_shows_nothing_and_one_that_could_not_be_read_says_why():
    assert heatmap.section_html(shapes_trace()) == "" == heatmap.figure_html(shapes_trace())
    trace = shapes_trace()
    trace.image_attention = ImageAttention.missing(
        "There is no image in this question, so there is no attention on it to show."
    )
    assert heatmap.section_html(trace) == (
        '<div class="heatmap-note" role="note">No attention heatmap: There is no image in this question, '
        "so there is no attention on it to show.</div>"
    )


def test_a_token_that_looked_elsewhere_is_drawn_faint():
    assert heatmap.cell_style(0.001, 0.002) == "box-shadow:none"  # under the 5% floor: no cell marked
    assert heatmap.cell_style(0.1, 0.2).startswith("box-shadow:inset 0 0 0 2px")  # half the peak: a thinner line
