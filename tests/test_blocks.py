"""The block view on hand-built traces: a row per round, its chips, and a token tree's drawing
(nodes by depth, edges to parents, the accepted path marked, rejected branches visibly rejected)."""

import dataclasses
import re

import pytest
from cycles import left_in_cycles
from test_render import spd_trace

from demo.engine.events import DraftTree, RoundEvent, TokenEvent, Trace, TreeNode
from demo.page import blocks, render, teach

pytestmark = pytest.mark.fast  # the fast tier (`pytest -m fast`): pure functions and tiny models, milliseconds each


def test_block_view_marks_accepted_rejected_and_unchecked_drafts():
    html = blocks.blocks_html(spd_trace())
    rows = re.findall(r'<summary class="round">(.*?)</summary>', html)
    assert len(rows) == 3
    first = rows[0]
    assert re.findall(r'class="chip (chip-\w+)', first) == ["chip-ok", "chip-no", "chip-skip", "chip-own"]
    assert "chip-resampled" in first and ">✓ red<" in first and ">✗ circle<" in first and "> square<" in first
    second = rows[1]
    assert re.findall(r'class="chip (chip-\w+)', second) == ["chip-ok"] * 3 + ["chip-own"]
    assert "chip-bonus" in second and "3/3 accepted · +4" in second


def test_block_view_greys_out_the_target_token_when_the_answer_ended_inside_the_drafts():
    third = re.findall(r'<summary class="round">(.*?)</summary>', blocks.blocks_html(spd_trace()))[2]
    assert "chip-unused" in third and '<span class="stop">stop</span>' in third


def test_block_view_keeps_only_the_latest_rounds():
    trace = spd_trace()
    trace.rounds = [trace.rounds[0]] * (blocks.MAX_ROUNDS_SHOWN + 7)
    html = blocks.blocks_html(trace)
    assert html.count('<summary class="round">') == blocks.MAX_ROUNDS_SHOWN
    assert "7 earlier rounds not shown" in html


def tree_trace() -> Trace:
    """spd_trace with a fourth round drafted as a tree, after the answer's " top":

    " the" ✓ ── " red" ✓ ── " circle" ✗      (the path, then the child rejected there)
           └── " blue" ✗ ── " square" ○      (turned down, and what hung below it)
    " a"   ✗ ── " big" ○
    """
    trace = spd_trace(stop="max_new_tokens")
    nodes = (
        TreeNode(20, " the", -1, 1, 0.6, True),
        TreeNode(21, " a", -1, 1, 0.3, False),
        TreeNode(22, " red", 0, 2, 0.5, True),
        TreeNode(23, " blue", 0, 2, 0.4, False),
        TreeNode(24, " circle", 2, 3, 0.7, False),
        TreeNode(25, " big", 1, 2, 0.2, False),
        TreeNode(26, " square", 3, 3, 0.9, False),
    )
    tree = DraftTree(nodes, path=(0, 2))
    trace.tokens += [
        TokenEvent(8, 20, " the", "accepted", 4, p=0.7, q=0.6, accept_prob=1.0, t=0.13),
        TokenEvent(9, 22, " red", "accepted", 4, p=0.6, q=0.5, accept_prob=1.0, t=0.13),
        TokenEvent(10, 27, " cube", "resampled", 4, p=0.5, t=0.13),
    ]
    trace.rounds.append(
        RoundEvent(4, (20, 22, 24), (" the", " red", " circle"), 2, 27, 3, None, 0.01, 0.02, t=0.13, tree=tree)
    )
    return trace


def test_a_tree_round_is_drawn_under_its_row_and_chain_rounds_are_not():
    html = blocks.blocks_html(tree_trace())
    assert html.count('<div class="tree" ') == 1 and 'data-round="4"' in html
    row = re.findall(r'<summary class="round">(.*?)</summary>', html)[3]
    assert "tree of 7 · 2/3 accepted · +3" in row
    assert "text-only drafter · 1 draft tree<" in html
    assert html.index('<details class="round-d" data-round="4">') < html.index('<div class="tree" data-round="4">')


def test_tree_nodes_are_marked_accepted_rejected_or_dropped_by_more_than_colour():
    tree = tree_trace().rounds[-1].tree
    assert blocks.verdicts(tree) == ["ok", "no", "ok", "no", "no", "drop", "drop"]
    html = blocks.tree_html(tree_trace().rounds[-1], " top")
    assert re.findall(r'class="tn tn-(\w+)"', html) == ["ok", "no", "ok", "no", "no", "drop", "drop"]
    faces = re.findall(r'class="tn tn-\w+".*?<text[^>]*>(.*?)</text>', html)
    assert faces == ["✓ the", "✗ a", "✓ red", "✗ blue", "✗ circle", "○ big", "○ square"]
    assert "depth 2: ‘ red’, q = 0.500, on the accepted path" in html
    assert "depth 3: ‘ circle’, q = 0.700, rejected: the target took another token here" in html
    assert "depth 3: ‘ square’, q = 0.900, dropped with its rejected branch, never checked" in html
    assert html.count('tabindex="0"') == 7  # every node focusable
    assert "accepted path: ‘ the’ ‘ red’" in html  # the drawing's own label, for a screen reader


def test_tree_layout_puts_nodes_in_columns_by_depth_and_chains_on_one_row():
    r = tree_trace().rounds[-1]
    assert blocks.layout(r.tree) == [
        0,
        2,
        0,
        1,
        0,
        2,
        1,
    ]  # leaves in depth-first order; a node on its first child's row
    html = blocks.tree_html(r, " top")
    boxes = re.findall(r'<rect x="(\d+)" y="(\d+)"', html)
    depth_x = {n.depth: int(x) for n, (x, _) in zip(r.tree.nodes, boxes, strict=True)}
    assert depth_x == {1: blocks.ROOT_W, 2: blocks.ROOT_W + blocks.COL, 3: blocks.ROOT_W + 2 * blocks.COL}
    assert [int(y) for _, y in boxes] == [blocks.HEAD + row * blocks.ROW for row in [0, 2, 0, 1, 0, 2, 1]]
    width, height = blocks.ROOT_W + 3 * blocks.COL + 4, blocks.HEAD + 3 * blocks.ROW
    assert f'<svg class="tree-svg" width="{width}" height="{height}"' in html
    edges = re.findall(r'class="te te-(\w+)" d="M(\d+) (\d+) H\d+ V(\d+) H(\d+)"', html)
    assert [e[0] for e in edges] == ["ok", "no", "ok", "no", "no", "drop", "drop"]
    red = edges[2]  # " red" hangs off " the": from its box's right edge to its own column
    assert int(red[1]) == blocks.ROOT_W + blocks.BOX_W and int(red[4]) == blocks.ROOT_W + blocks.COL
    assert ">top</text>" in html  # the answer's last token before the round, where depth 1 hangs


def test_drawing_a_tree_leaves_nothing_to_the_cyclic_collector():
    r = tree_trace().rounds[-1]  # a tree lane's block view is drawn again at every redraw
    assert left_in_cycles(lambda: blocks.tree_html(r, " top")) == []


def test_a_tree_with_a_long_token_shortens_its_face_but_not_its_label():
    r = tree_trace().rounds[-1]
    long = dataclasses.replace(r.tree.nodes[0], text=" extraordinarily")
    tree = dataclasses.replace(r.tree, nodes=(long, *r.tree.nodes[1:]))
    html = blocks.tree_html(dataclasses.replace(r, tree=tree), "")
    assert ">✓ extraord…</text>" in html and "‘ extraordinarily’" in html


def test_the_stop_token_reads_as_one_end_marker_in_the_panel_the_block_view_and_the_inspector():
    trace = spd_trace(stop="eos")
    # The engine decodes a drafted stop token as its tokenizer spells it (the answer's text skips it).
    trace.rounds[-1] = dataclasses.replace(trace.rounds[-1], drafted_texts=("<|end|>",))
    panel, view = render.tokens_html(trace), blocks.blocks_html(trace)
    bars = teach._bars([("</s>", 0.9), ("<|im_end|>", 0.05), (" end", 0.05)])
    for html in (panel, view, bars):
        assert teach.END_MARK in html and "&lt;|end|&gt;" not in html and "&lt;/s&gt;" not in html
    assert bars.count(teach.END_MARK) == 2 and "> end<" in bars  # the word " end" stays a word
    # A round's own token left without text by a character split across tokens is not the end.
    cut = spd_trace(stop="max_new_tokens")
    assert teach.END_MARK not in blocks.blocks_html(cut)
