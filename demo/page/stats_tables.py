"""The stats tables under each lane: every number from `demo.engine.metrics`, with its formula beside
it (or under it when `narrow`, three lanes side by side)."""

from __future__ import annotations

import math

from demo.engine import metrics
from demo.engine.events import Trace
from demo.page.render import _num  # a number as the page shows it: "–" for none or NaN


def _table(rows: list[str], narrow: bool) -> str:
    """A stats table; `narrow` (three lanes side by side) puts each formula under its row."""
    return f'<table class="stats{" stats-narrow" if narrow else ""}">{"".join(rows)}</table>'


def _row(name: str, value: str, formula: str = "") -> str:
    return f'<tr><th scope="row">{name}</th><td class="num">{value}</td><td class="formula">{formula}</td></tr>'


def speculative_stats_html(spd: Trace, speedup: float | None, narrow: bool = False) -> str:
    """The speculative run's numbers, each from demo.engine.metrics, with its formula beside it
    (under it, when `narrow`)."""
    s = metrics.summary(spd, speculative=True)
    n_decode = metrics.decode_tokens(spd)
    # The breakdown counts the tokens shown (a round's tokens arrive before its round event).
    kinds = {kind: sum(t.kind == kind for t in spd.tokens) for kind in ("accepted", "resampled", "bonus", "target")}
    rows = [
        _row(
            "tokens",
            str(s["tokens"]),
            f"{kinds['accepted']} accepted · {kinds['resampled']} resampled · {kinds['bonus']} bonus · "
            f"{kinds['target']} from the target alone (the prefill's)"
            if spd.tokens
            else "",
        ),
        _row("target forwards", str(s["target_forwards"]), "in decoding, one per round (the prefill is extra)"),
        _row("τ", _num(s["tau"], 2), f"tokens after prefill / target forwards = {n_decode} / {s['target_forwards']}"),
        _row("α", _num(s["alpha"], 2), _alpha_formula(spd, s)),
        _row("decode tokens/s", _num(s["tok_s"], 1), f"{n_decode} tokens / {s['decode_s']:.3f} s"),
    ]
    # The page tells two speedups, in the headline; the wall clock and MBSU stay closed, as there.
    other = [
        _row(
            "wall-clock speedup",
            "–" if speedup is None or math.isnan(speedup) else f"×{speedup:.2f}",
            "decode tokens/s over the autoregressive run's",
        ),
        _row(
            "MBSU (memory-bound speedup)",
            _num(s["mbsu_made"], 2),
            f"τ / (1 + d·c): the speedup if every forward cost only reading its weights; d = drafts made per "
            f"round = {_num(s['drafts_per_round'], 2)} (γ = {spd.gamma if spd.start else '–'}), c = drafter/target "
            f"params = {_num(s['c'], 3)}"
            + ("; a tree counts γ drafter steps a round, one forward per depth" if _tree_nodes(spd) else ""),
        ),
    ]
    return _table(rows, narrow) + (
        f'<details class="how-computed"><summary>How these are computed: the wall clock and MBSU</summary>'
        f"{_table(other, narrow)}</details>"
    )


def _tree_nodes(spd: Trace) -> int:
    """Nodes the run's token trees proposed, in all (0: a chain drafter)."""
    return sum(len(r.tree.nodes) for r in spd.rounds if r.tree)


def _alpha_formula(spd: Trace, s: dict) -> str:
    """α's formula; for a token tree, which drafts it counts (the walked branch) and per node."""
    nodes = _tree_nodes(spd)
    if not nodes:
        return f"accepted / drafted = {s['accepted']} / {s['drafted']} (drafted: every token the drafter proposed)"
    trees = [r for r in spd.rounds if r.tree]
    kept = sum(r.n_accepted for r in trees)
    return (
        f"accepted / drafted = {s['accepted']} / {s['drafted']}, counting each tree's walked branch; the trees "
        f"proposed {nodes} nodes ({nodes / len(trees):.1f} a round): per node, {kept} / {nodes} = {kept / nodes:.2f}"
    )


def autoregressive_stats_html(ar: Trace, narrow: bool = False) -> str:
    s = metrics.summary(ar)
    n_decode = metrics.decode_tokens(ar)
    rows = [
        _row("tokens", str(s["tokens"]), "every one from the target"),
        _row("target forwards", str(s["target_forwards"]), "in decoding, one per token"),
        _row("τ", _num(s["tau"], 2), "1 by construction"),
        _row("decode tokens/s", _num(s["tok_s"], 1), f"{n_decode} tokens / {s['decode_s']:.3f} s"),
        _row("prefill", f"{s['prefill_s'] * 1000:.0f} ms" if ar.prefill else "–", "image + prompt, one forward"),
    ]
    return _table(rows, narrow)
