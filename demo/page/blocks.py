"""Events -> the block view: one row per verification round of a speculative lane, each opening into
the p/q inspector (`demo.page.teach`), and for a token-tree lane each round's tree of drafts, the
accepted path, the rejected children and the dropped branches told apart by mark and line as well
as colour. Pure functions of `Trace`s, styled by `assets/page.css`."""

from __future__ import annotations

import html

from demo.engine.detokenize import END_OF_TURN, END_TOKENS
from demo.engine.events import DraftTree, RoundEvent, Trace
from demo.models import drafter_kinds
from demo.page import teach
from demo.page.render import KIND_LABELS, visible

MAX_ROUNDS_SHOWN = 200  # the block view keeps the latest rounds; longer answers scroll past the rest
NODE_CHARS = 9  # a tree node shows this many characters of its token (all of it in its label)


END = END_OF_TURN[0]  # stands for the stop token of a round that ended the answer (drawn as the end marker)


def _chip(text: str, cls: str, mark: str = "", title: str = "") -> str:
    face = teach.END_MARK if text in END_TOKENS else visible(text, line_breaks=False) if text else "∅"
    return f'<span class="chip {cls}" title="{html.escape(title, quote=True)}">{mark}{face}</span>'


def blocks_html(trace: Trace) -> str:
    """One row per verification round: the drafts (accepted ✓, rejected ✗, not checked) and the
    target's own token (the resample, the bonus, or a plain target step when nothing was drafted);
    a tree round's tree under it. Each row opens (click, or Enter on it; on the Race tab also a
    click on one of the round's tokens in the lane's panel) into the inspector: p and q at each
    checked draft (`demo.page.teach.inspector_html`), filled in once the run is over."""
    if not trace.rounds:
        return '<div class="blocks empty">Rounds appear here as the speculative run verifies them.</div>'
    rows = []
    if trace.start is not None and trace.start.drafter is not None:
        trees = sum(r.tree is not None for r in trace.rounds)
        kind = f" · {trees} draft tree{'s' if trees != 1 else ''}" if trees else ""
        rows.append(f'<div class="blocks-head">{html.escape(trace.start.drafter.name)} drafter{kind}</div>')
    # A round's last token is the target's; one without text that ends the answer is its stop token.
    last_text = {tok.round: tok.text for tok in trace.tokens}
    if trace.done and trace.tokens and trace.summary.stop == "eos" and not trace.tokens[-1].text:
        last_text[trace.tokens[-1].round] = END
    hidden = max(0, len(trace.rounds) - MAX_ROUNDS_SHOWN)
    if hidden:
        rows.append(f'<div class="round more">{hidden} earlier rounds not shown (see the export)</div>')
    for r in trace.rounds[hidden:]:
        rows.append(_round(r, trace, last_text.get(r.index) if r.n_emitted > r.n_accepted else None))
        if r.tree is not None:
            rows.append(tree_html(r, last_text.get(r.index - 1, "")))
    return f'<div class="blocks">{"".join(rows)}</div>'


def _why_none(trace: Trace, r: RoundEvent) -> str:
    """Why a speculative round drafted nothing: the token budget's last token, or its kind's reason."""
    drafter = trace.start and trace.start.drafter
    return drafter_kinds.of(drafter.kind).silent if drafter and r.stop != "max_new_tokens" else "token budget"


def _round(r: RoundEvent, trace: Trace, own: str | None) -> str:
    """A round's row: its summary line, opening into the inspector. `own`: the target's token,
    None when the answer stopped inside the drafts."""
    chips = []
    for j, text in enumerate(r.drafted_texts):
        if j < r.n_accepted:
            chips.append(_chip(text, "chip-ok", "✓", "accepted"))
        elif j == r.n_accepted:
            chips.append(_chip(text, "chip-no", "✗", "rejected by the target"))
        else:
            chips.append(_chip(text, "chip-skip", "", "not checked: after the first rejection"))
    n = len(r.drafted_ids)
    kind = "resampled" if r.n_accepted < n else "bonus" if n else "target"
    target = _chip(
        own or "",
        f"chip-own chip-{kind}" + ("" if own is not None else " chip-unused"),
        "",
        KIND_LABELS[kind] if own is not None else "not used: the answer ended before it",
    )
    drafts = "".join(chips) if chips else f'<span class="nodraft">no drafts ({_why_none(trace, r)})</span>'
    size = f"tree of {len(r.tree.nodes)} · " if r.tree is not None else ""
    meta = f"{size}{r.n_accepted}/{n} accepted · +{r.n_emitted}" if n else f"+{r.n_emitted}"
    stop = ' <span class="stop">stop</span>' if r.stop else ""
    summary = (
        f'<summary class="round"><span class="rno">R{r.index}</span><span class="drafts">{drafts}</span>'
        f'<span class="arrow">→</span>{target}<span class="meta">{meta}{stop}</span></summary>'
    )
    if trace.done:
        inside = teach.inspector_html(r, trace.greedy) or '<div class="inspector">no detail recorded</div>'
        reason = teach.round_reason(trace, r)
        inside = (f'<p class="why-rejected">{reason}</p>' if reason else "") + inside
    else:
        inside = '<div class="inspector">The inspector fills in once the run is over.</div>'
    return f'<details class="round-d" data-round="{r.index}">{summary}{inside}</details>'


# --- the tree of a round ---------------------------------------------------------------------------

ROW, BOX_H = 26, 20  # px: a row per leaf, a node box's height
COL, BOX_W = 100, 88  # px: a column per depth, a node box's width
ROOT_W, HEAD = 72, 18  # px: the column of the answer's last token, the row of depth labels
TREE_FITS_PX = 380  # a tree at most this wide fits a phone's screen; a wider one says to scroll (there)
VERDICTS = {
    "ok": ("✓", "on the accepted path"),
    "no": ("✗", "rejected: the target took another token here"),
    "drop": ("○", "dropped with its rejected branch, never checked"),
}


def verdicts(tree: DraftTree) -> list[str]:
    """Each node's verdict: "ok" on the accepted path; "no" for a child of the answer's last
    token or of an accepted node that is not on the path (the target turned it down); "drop" for
    the rest, which hang below a rejected node and were never checked."""
    path = set(tree.path)
    return [
        "ok" if i in path else "no" if node.parent == -1 or node.parent in path else "drop"
        for i, node in enumerate(tree.nodes)
    ]


def layout(tree: DraftTree) -> list[int]:
    """Each node's row: leaves take rows in depth-first order, and a node shares its first child's
    row, so a chain reads as one line and each branch opens a row below."""
    children: dict[int, list[int]] = {}
    for i, node in enumerate(tree.nodes):
        children.setdefault(node.parent, []).append(i)
    rows = [0] * len(tree.nodes)
    next_row = 0

    def place(i: int) -> int:
        nonlocal next_row
        kids = children.get(i, [])
        if not kids:
            rows[i], next_row = next_row, next_row + 1
        else:
            rows[i] = min(place(k) for k in kids)
        return rows[i]

    for root in children.get(-1, []):
        place(root)
    place = None  # it calls itself, so it sits in its own closure: a cycle left to the rare full collection
    return rows


def _short(text: str, chars: int = NODE_CHARS) -> str:
    face = text.strip(" ").replace("\n", "↵") or ("␣" if text else "∅")
    return face if len(face) <= chars else face[: chars - 1] + "…"


def tree_html(r: RoundEvent, before: str) -> str:
    """Round `r`'s tree of drafts as an SVG: a column per depth after the answer's last token
    (`before`), an edge from each node to its parent, every node marked with its verdict."""
    tree = r.tree
    rows, marks = layout(tree), verdicts(tree)
    depth = max((n.depth for n in tree.nodes), default=0)
    width = ROOT_W + depth * COL + 4
    height = HEAD + (max(rows, default=0) + 1) * ROW

    def x(d: int) -> int:
        return ROOT_W + (d - 1) * COL

    def y(row: int) -> int:
        return HEAD + row * ROW

    heads = "".join(
        f'<text class="th" x="{x(d) + BOX_W // 2}" y="12">{"depth " if d == 1 else ""}{d}</text>'
        for d in range(1, depth + 1)
    )
    first_root = next((rows[i] for i, n in enumerate(tree.nodes) if n.parent == -1), 0)
    edges, nodes = [], []
    for i, node in enumerate(tree.nodes):
        x0 = ROOT_W - 12 if node.parent == -1 else x(tree.nodes[node.parent].depth) + BOX_W
        y0 = y(first_root if node.parent == -1 else rows[node.parent]) + BOX_H // 2
        y1, x1 = y(rows[i]) + BOX_H // 2, x(node.depth)
        edges.append(f'<path class="te te-{marks[i]}" d="M{x0} {y0} H{x0 + 5} V{y1} H{x1}"/>')
        mark, verdict = VERDICTS[marks[i]]
        label = f"depth {node.depth}: {_quote(node.text)}, q = {node.q:.3f}, {verdict}"
        nodes.append(
            f'<g class="tn tn-{marks[i]}" tabindex="0" role="img" aria-label="{html.escape(label, quote=True)}">'
            f"<title>{html.escape(label)}</title>"
            f'<rect x="{x1}" y="{y(rows[i])}" width="{BOX_W}" height="{BOX_H}" rx="4"/>'
            f'<text x="{x1 + 5}" y="{y(rows[i]) + 14}">{mark} {html.escape(_short(node.text))}</text></g>'
        )
    root = f'<g class="tn-root"><text x="2" y="{y(first_root) + 14}">{html.escape(_short(before or "…", 7))}</text></g>'
    path = " ".join(_quote(tree.nodes[i].text) for i in tree.path) or "none"
    summary = (
        f"Round {r.index}'s draft tree: {len(tree.nodes)} nodes over {depth} levels, scored by one target forward; "
        f"accepted path: {path}"
    )
    svg = (
        f'<svg class="tree-svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="group" '
        f'aria-label="{html.escape(summary, quote=True)}">{heads}{"".join(edges)}{root}{"".join(nodes)}</svg>'
    )
    hint = '<span class="tree-hint"> · scroll sideways for every level</span>' if width > TREE_FITS_PX else ""
    head = (
        f'<div class="tree-head">R{r.index} draft tree: {len(tree.nodes)} nodes, one verify · '
        '<span class="tk tk-ok">✓ accepted path</span> <span class="tk tk-no">✗ rejected</span> '
        f'<span class="tk tk-drop">○ dropped with its branch</span>{hint}</div>'
    )
    return f'<div class="tree" data-round="{r.index}">{head}<div class="tree-scroll">{svg}</div></div>'


def _quote(text: str) -> str:
    """A token's text quoted for a label, line breaks shown."""
    return "‘" + text.replace("\n", "↵") + "’"
