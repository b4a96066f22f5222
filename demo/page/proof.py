"""Proof on the page: where the time went (drafting, verification, everything else), the sampling law
checked, and which answer tokens needed the image. Pure functions of traces and of the session's
plain results -> plotly figures and HTML; no model, no tensor."""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from demo.engine import metrics
from demo.engine.events import Trace
from demo.page.speedup import steps
from demo.page.teach import LOOKED

DRAFT, VERIFY, OTHER = "#E69F00", "#0072B2", "#999999"  # Okabe-Ito orange and blue, grey
PASS, FAIL, LAW = "#009E73", "#D55E00", "#000000"
HEIGHT = 300


# --- where the time goes ---------------------------------------------------------------------------


def time_split(spd: Trace, ar: Trace) -> dict:
    """Every round of `spd` split into drafting, verification and everything else, in seconds as
    its clock measured them (the chart), and a round on average at this race's step costs
    (`metrics.split`, the headline's too: `costs`, None without them), for the sentence."""
    start = spd.tokens[0].t if spd.tokens else (spd.prefill.t if spd.prefill else 0.0)
    rounds, before = [], start
    for r in spd.rounds:
        rounds.append(
            {
                "draft": r.draft_seconds,
                "verify": r.verify_seconds,
                "other": max(0.0, r.t - before - r.draft_seconds - r.verify_seconds),
            }
        )
        before = r.t
    costs = metrics.split(spd, ar)
    tree = spd.start.drafter.tree if spd.start and spd.start.drafter else None
    return {
        "rounds": rounds,
        "costs": costs,
        "clock": metrics.decode_seconds(spd),
        "t1": costs["t1"] if costs else math.nan,
        "tau": metrics.tau(spd),
        "alpha": metrics.alpha(spd),
        "gamma": spd.gamma,
        "by_position": metrics.acceptance_by_position(spd),
        "tree": tree is not None,
        "drafter": spd.start.drafter.name if spd.start and spd.start.drafter else "",
    }


def time_sentence(split: dict) -> str:
    """One sentence from the race: what a round costs in single target steps (the headline's step
    costs), what τ buys with it, and which part ate the speedup (the largest cost beyond the one
    step τ is measured against)."""
    c, tau = split["costs"], split["tau"]
    if not split["rounds"] or c is None or math.isnan(tau):
        return "The race has no timed rounds to split yet."
    draft, verify, other = (c[p] / c["t1"] for p in ("draft", "verify", "other"))
    what = (
        f"the tree verifies {c['width'] - 1:.0f} nodes a round"
        if split["tree"]
        else f"each round verifies {c['width']:.1f} tokens"
    )
    eaten = {
        "verification": verify - 1,  # the one step every round pays anyway is not eaten
        "drafting": draft,
        "everything else (the host's part)": other,
    }
    worst = max(eaten, key=eaten.get)
    return (
        f"{split['drafter']}: {what}: verification costs {steps(verify)} single steps, drafting "
        f"({c['steps']:.1f} drafter steps) {steps(draft)} and everything else {steps(other)}, "
        f"so τ {tau:.1f} at α {split['alpha']:.0%} buys ×{c['low']:.2f}; {worst} ate the most of the ×{tau:.1f}."
    )


def time_figure(split: dict) -> go.Figure:
    """Left: each round's time, stacked drafting, verification, everything else (ms), with the
    single target step as a line. Right: acceptance by draft position, τ and α in its title."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.66, 0.34], horizontal_spacing=0.12)
    xs = list(range(1, len(split["rounds"]) + 1))
    for part, colour, name in (
        ("draft", DRAFT, "drafting (γ·D)"),
        ("verify", VERIFY, "verification (T(γ+1))"),
        ("other", OTHER, "everything else"),
    ):
        fig.add_trace(
            go.Bar(x=xs, y=[r[part] * 1e3 for r in split["rounds"]], name=name, marker_color=colour), row=1, col=1
        )
    if split["t1"] == split["t1"]:
        fig.add_hline(y=split["t1"] * 1e3, line_dash="dot", line_color="#333333", row=1, col=1)
    positions = list(range(1, len(split["by_position"]) + 1))
    rates = [None if v != v else v for v in split["by_position"]]
    fig.add_trace(
        go.Bar(x=positions, y=rates, name="accepted at position", marker_color=PASS, showlegend=False), row=1, col=2
    )
    fig.update_layout(
        barmode="stack",
        height=HEIGHT + 50,
        margin={"l": 50, "r": 12, "t": 52, "b": 100},
        paper_bgcolor="white",
        plot_bgcolor="white",
        font={"size": 11},
        title={
            "text": f"Where the time goes: {split['drafter']}<br><sup>τ {split['tau']:.2f}, α {split['alpha']:.0%}</sup>",
            "font": {"size": 14},
            "x": 0.02,
        },
        # under the axis titles, in a margin of its own: never over the bars or the titles, at any width
        legend={"orientation": "h", "x": 0, "y": -0.32, "yanchor": "top", "font": {"size": 10}},
    )
    fig.update_xaxes(title_text="round (dots: 1 step)", row=1, col=1)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_xaxes(title_text="draft position", row=1, col=2)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", title_text="accepted", row=1, col=2)
    return fig


# --- the sampling law ----------------------------------------------------------------------------------

WAY_NAMES = {
    "target": "the target alone",
    "speculative": "the speculative lane",
    "broken": "a broken rule (accept every draft)",
}
SHORT = {"target": "target alone", "speculative": "the lane", "broken": "broken rule"}  # the panels' titles


def law_figure(check: dict) -> go.Figure:
    """One panel per way: its share of the n draws per outcome (bars, green where the way passed,
    red where it failed), the target's exact law as black markers on every panel."""
    ways = [w for w in WAY_NAMES if w in check["counts"]]
    # one figure a line: three panels side by side at phone width leave each title about 110 px
    titles = [f"{SHORT[w]}<br>TV {check['tv'][w]:.3f}<br>p {check['p_value'][w]:.2g}" for w in ways]
    fig = make_subplots(rows=1, cols=len(ways), shared_yaxes=True, subplot_titles=titles, horizontal_spacing=0.04)
    labels = [f"{i + 1}. {label}" for i, label in enumerate(check["labels"])]
    n = check["n"]
    for col, way in enumerate(ways, start=1):
        colour = PASS if check["passed"][way] else FAIL
        fig.add_trace(
            go.Bar(x=labels, y=[c / n for c in check["counts"][way]], marker_color=colour, name=WAY_NAMES[way]),
            row=1,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=check["law"],
                mode="markers",
                marker={"color": LAW, "symbol": "line-ew-open", "size": 18, "line": {"width": 3}},
                name="target's exact p",
                showlegend=col == 1,
            ),
            row=1,
            col=col,
        )
    fig.update_layout(
        height=HEIGHT + 56,
        margin={"l": 50, "r": 12, "t": 96, "b": 80},
        paper_bgcolor="white",
        plot_bgcolor="white",
        font={"size": 11},
        showlegend=False,
        title={
            "text": f"The first {check['k']} tokens after “{check['context']}”, {n} draws each way",
            "font": {"size": 14},
            "x": 0.02,
        },
    )
    fig.update_annotations(font_size=11)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=1)
    return fig


def law_summary(check: dict) -> str:
    """The verdicts: each way passes when its p-value is above the bound, with the TV against the
    TV a draw of n from the law stays under."""
    items = []
    for way in WAY_NAMES:
        if way not in check["counts"]:
            continue
        ok = check["passed"][way]
        verdict = "writes the target's law" if ok else "does not write the target's law"
        items.append(
            f"<li class='{'law-pass' if ok else 'law-fail'}'><b>{html.escape(WAY_NAMES[way])}</b> {verdict}: "
            f"TV {check['tv'][way]:.3f} (bound {check['tv_bound']:.3f}), p-value {check['p_value'][way]:.3g} "
            f"({'above' if ok else 'below'} {check['alpha']:g}).</li>"
        )
    for note in (check.get("shortened"), check.get("note")):  # the budget's sentence; why it could not fail
        if note:
            items.append(f"<li class='law-note'>{html.escape(note)}</li>")
    return (
        f"<div class='law-check'><p>{check['n']} draws each way of the {check['k']} tokens after "
        f"“{html.escape(check['context'])}”, drafter {html.escape(check['drafter'])}, γ {check['gamma']}.</p>"
        f"<ul>{''.join(items)}</ul></div>"
    )


# --- did the target use the image --------------------------------------------------------------------


def views(spds: list[Trace], ar: Trace) -> dict:
    """The proof section's views of a finished race (component name -> value): each speculative
    lane's time split (sentences, the first two lanes' charts) and, once the race's call has read
    it (`Trace.ablation`), the first lane's image dependence."""
    splits = [time_split(spd, ar) for spd in spds]
    note = "".join(f"<p class='time-sentence'>{html.escape(time_sentence(s))}</p>" for s in splits)
    second = time_figure(splits[1]) if len(splits) > 1 else None
    update = {"time_note": note, "time_chart": time_figure(splits[0]), "time_chart2": shown(second)}
    if spds[0].ablation is not None:
        update["dependence"] = dependence_html(spds[0], spds[0].ablation)
    return update


def shown(figure):
    import gradio as gr  # the one update that needs it: a hidden plot shown

    return gr.update(value=figure, visible=figure is not None)


def dependence_html(trace: Trace, ablation: dict) -> str:
    """The answer with each token that needed the image marked (`ablation`: `Ablation.to_dict()`),
    its p with and without the image in its tooltip, and one line on how the two readings agree:
    attention (a share above 35%: the target looked at the image) and ablation (it needed it)."""
    if ablation.get("unavailable"):
        return f"<p class='ablation-none'>{html.escape(ablation['unavailable'])}</p>"
    shares = [trace.image_share(t.index) for t in trace.tokens]  # the race's one attention reading
    spans, both, looked_only, needed_only = [], 0, 0, 0
    for i, tok in enumerate(trace.tokens):
        dep = ablation["dependent"][i]
        looked = shares[i] is not None and shares[i] >= LOOKED
        both += dep and looked
        looked_only += looked and not dep
        needed_only += dep and not looked
        tip = f"p with the image {ablation['p_with'][i]:.2f}, without {ablation['p_without'][i]:.2f}"
        if ablation["flips"][i]:
            tip += "; without it the target would write another token"
        cls, style = ("img-dep", f" style='text-decoration: underline 3px {FAIL}'") if dep else ("img-indep", "")
        spans.append(f"<span class='{cls}'{style} title='{html.escape(tip)}'>{html.escape(tok.text)}</span>")
    n_dep = sum(ablation["dependent"])
    line = (
        f"{n_dep} of {len(trace.tokens)} tokens needed the image (underlined: blanking it made them at least "
        f"{ablation['ratio']:g} times less likely). Attention and ablation agree on {both}; "
        f"{looked_only} drew attention to the image without needing it, {needed_only} needed it with little attention."
    )
    return f"<div class='image-dependence'><p>{''.join(spans)}</p><p>{line}</p></div>"
