"""The benchmark's self-contained HTML report: plotly charts (library inlined once) and tables."""

from __future__ import annotations

import html
import math
from dataclasses import asdict

import plotly.graph_objects as go

from demo.page.analysis.charts import category_figure, position_figure

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")  # Okabe-Ito


def _fig_html(fig: go.Figure, first: bool) -> str:
    fig.update_layout(template="plotly_white", height=360, margin=dict(l=50, r=20, t=50, b=40))
    return fig.to_html(full_html=False, include_plotlyjs="inline" if first else False)


def _series(cells, decoding: str, y: str):
    """(task, drafter) -> sorted [(gamma, value)] for one decoding mode."""
    series: dict[tuple[str, str], list] = {}
    for c in cells:
        if c.decoding == decoding:
            series.setdefault((c.task, c.drafter), []).append((c.gamma, getattr(c, y)))
    return {k: sorted(v) for k, v in series.items()}


def tau_figure(cells) -> go.Figure:
    fig = go.Figure()
    for i, ((task, drafter), points) in enumerate(_series(cells, "greedy", "tau").items()):
        fig.add_scatter(
            x=[g for g, _ in points],
            y=[v for _, v in points],
            name=f"{task} / {drafter}",
            mode="lines+markers",
            line=dict(color=PALETTE[i % len(PALETTE)], dash="solid" if "text" in drafter else "dash"),
        )
    fig.update_layout(title="Block efficiency tau by draft length (greedy)", xaxis_title="gamma", yaxis_title="tau")
    return fig


def speedup_figure(cells) -> go.Figure:
    fig = go.Figure()
    lean = [c for c in cells if c.drafter_path != "transformers"] or cells
    measured = _series(lean, "greedy", "speedup")
    predicted = _series(lean, "greedy", "predicted_speedup")
    limit = _series(lean, "greedy", "limit_speedup")
    for i, key in enumerate(measured):
        colour = PALETTE[i % len(PALETTE)]
        fig.add_scatter(
            x=[g for g, _ in measured[key]],
            y=[v for _, v in measured[key]],
            mode="lines+markers",
            name=f"{key[0]} / {key[1]} measured",
            line=dict(color=colour),
        )
        fig.add_scatter(
            x=[g for g, _ in predicted[key]],
            y=[v for _, v in predicted[key]],
            mode="lines",
            name=f"{key[0]} / {key[1]} cost model",
            line=dict(color=colour, dash="dot"),
        )
        fig.add_scatter(
            x=[g for g, _ in limit[key]],
            y=[v for _, v in limit[key]],
            mode="lines",
            name=f"{key[0]} / {key[1]} limit (free drafting)",
            line=dict(color=colour, dash="dash", width=1),
        )
    fig.add_hline(y=1.0, line=dict(color="grey", width=1))
    fig.update_layout(
        title="Wall-clock speedup of SPD over AR (greedy, lean path): measured, cost model, limit",
        xaxis_title="gamma",
        yaxis_title="speedup",
    )
    return fig


def _fmt(v) -> str:
    if isinstance(v, float):
        return "–" if math.isnan(v) else f"{v:.2f}"
    if isinstance(v, list):
        return " ".join(_fmt(x) for x in v)
    return html.escape(str(v))


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def step_rows(cells) -> list[dict]:
    """Where the time goes, per cell: the medians of T1, T(gamma+1), D with their IQRs, the overhead
    per round outside model forwards, and the speedup against its limit."""
    return [
        {
            "task": c.task,
            "drafter": c.drafter,
            "path": c.drafter_path,
            "gamma": c.gamma,
            "decoding": c.decoding,
            "tau": c.tau,
            "T1 ms": c.t1_ms,
            "T(gamma+1) ms": c.t_verify_ms,
            "D ms": c.d_ms,
            "IQR T1 / T(gamma+1) / D ms": [c.t1_iqr_ms, c.t_verify_iqr_ms, c.d_iqr_ms],
            "overhead ms / round (SPD)": c.overhead_ms_per_round,
            "D / T1": c.d_ms / c.t1_ms,
            "drafting share": c.draft_share,
            "speedup": c.speedup,
            "limit tau*T1/T(gamma+1)": c.limit_speedup,
            "speedup / limit": c.speedup / c.limit_speedup,
        }
        for c in cells
    ]


def goal_table(goal_rows) -> list[dict]:
    verdict = {True: "met", False: "not met", None: "not measured"}
    return [
        {"goal": g["goal"], "bar": g["bar"], "measured": g["value"], "": verdict[g["met"]], "from": g["from"] or "–"}
        for g in goal_rows
    ]


def page(cells, peer_result, analysis_summary, meta, goal_rows=()) -> str:
    figures = [
        tau_figure(cells),
        speedup_figure(cells),
        category_figure(analysis_summary),
        position_figure(analysis_summary),
    ]
    charts = "".join(f"<div class='chart'>{_fig_html(f, i == 0)}</div>" for i, f in enumerate(figures))
    peer_rows = []
    for d, p in (peer_result or {}).items():
        peer_rows.append(
            {
                "drafter": d,
                "path": p.get("drafter_path", "–"),
                "our longest draft": p["gamma"],
                "our confidence stop": p.get("min_confidence", 0.0),
                "our AR tok/s": p["tok_s"]["ours_ar"],
                "HF generate tok/s": p["tok_s"]["hf_generate"],
                "our AR / HF generate": p["ar_vs_hf_generate"],
                "our SPD tok/s": p["tok_s"]["ours_spd"],
                "HF assisted tok/s": p["tok_s"]["hf_assisted"],
                "our SPD / HF assisted": p["spd_vs_hf_assisted"]
                if p["spd_vs_hf_assisted"]
                else f"HF cannot run this: {p['hf_assisted_error']}",
                "our SPD, transformers path / HF assisted": p.get("spd_transformers_path_vs_hf_assisted", "–"),
            }
        )
    rejected = "".join(f"<h3>{html.escape(d)}</h3>{_table(a['most_rejected'])}" for d, a in analysis_summary.items())
    meta_line = html.escape(", ".join(f"{k}: {v}" for k, v in meta.items() if k != "args"))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Speculative decoding benchmark</title>
<style>body{{font-family:system-ui,sans-serif;margin:2rem;color:#222}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ddd;padding:3px 7px;text-align:right}} th{{background:#f4f4f4}}
.charts{{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:1rem}}</style></head><body>
<h1>Speculative decoding of a multimodal target: benchmark</h1><p>{meta_line}</p>
<h2>The step-cost goals, from this run</h2>{_table(goal_table(goal_rows))}
<div class="charts">{charts}</div>
<h2>Where the time goes (medians per cell)</h2>{_table(step_rows(cells))}
<h2>Cells</h2>{_table([asdict(c) for c in cells])}
<h2>Peer comparison (same models, prompts and machine; interleaved; greedy)</h2>{_table(peer_rows)}
<h2>Most rejected words (greedy, largest gamma)</h2>{rejected}
</body></html>"""
