"""The Analysis tab's image-attention view: was the drafter rejected where the target looked at the
image, or where the answer depends on it? Pure functions of a batch (`view.Batch`) over
`demo.session.image_rejections`; each rejection listed links to its run's trace (`JS`)."""

from __future__ import annotations

import html

from demo.page.analysis.charts import wilson
from demo.session import image_rejections


def _by_drafter(batch) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in batch.compared():
        out.setdefault(r.drafter, []).extend(r.obs)
    return out


def rejections(batch) -> list[dict]:
    """Every rejection of the batch with its run, position, words and image share."""
    return [
        {
            "run": r.number,
            "drafter": r.drafter,
            "index": o.index,
            "token": o.token,
            "draft": o.draft,
            "category": o.category,
            "image_attention": o.image_attention,
        }
        for r in batch.compared()
        for o in r.obs
        if not o.accepted
    ]


def _span(row: dict) -> str:
    low, high = wilson(row["rejected"], row["drafted"])
    return f"{low:.0%}–{high:.0%}"


def _rate_row(drafter: str, rows: list[dict]) -> str:
    """A table row of `drafter`'s rejection rate in each of its `rows` (rejected / drafted), "–" where it drafted none."""
    cells = []
    for r in (r for r in rows if r["drafter"] == drafter):
        rate = r["rejection_rate"]
        cells.append(
            "<td>–</td>"
            if rate is None
            else f'<td>{rate:.0%} <span class="n">({r["rejected"]}/{r["drafted"]}; 95% {_span(r)})</span></td>'
        )
    return f"<tr><th>{html.escape(drafter)}</th>{''.join(cells)}</tr>"


def binned_table_html(rows: list[dict]) -> str:
    drafters = list(dict.fromkeys(r["drafter"] for r in rows))
    bins = list(dict.fromkeys((r["from"], r["to"]) for r in rows))
    head = "".join(f"<th>{lo:.0%}–{hi:.0%}</th>" for lo, hi in bins)
    body = [_rate_row(d, rows) for d in drafters]
    return (
        '<table class="an-rej an-attn"><caption>Rejection rate by the share of the target\'s attention on the '
        f"image at the drafted position (rejected / drafted)</caption><tr><th>drafter</th>{head}</tr>"
        f"{''.join(body)}</table>"
    )


def attention_html(batch) -> str:
    """The section, or the sentence saying why there is none; '' before any run."""
    if batch is None or not batch.runs:
        return ""
    by_drafter = _by_drafter(batch)
    sentence = image_rejections.headline(by_drafter)
    if sentence is None:
        whys = {r.trace.image_attention.unavailable for r in batch.runs if r.trace.image_attention}
        why = next((w for w in whys if w), "it was not read for these runs.")
        return f'<div class="an-attention"><p>No image attention: {html.escape(why)}</p></div>'
    top = image_rejections.most_image_dependent(rejections(batch))
    items = "".join(
        f'<li><a href="#an-runs" class="an-trace-link" data-run="{r["run"]}">run {r["run"]} '
        f"({html.escape(r['drafter'])})</a> at position {r['index']}: the target wrote "
        f"<b>{html.escape(repr(r['token']))}</b>, the drafter {html.escape(repr(r['draft']))} "
        f"({html.escape(r['category'])}); {r['image_attention']:.0%} of its attention on the image</li>"
        for r in top
    )
    listed = f"<p>The most image-dependent rejections:</p><ol>{items}</ol>" if items else ""
    return (
        f'<div class="an-attention"><p><b>{html.escape(sentence)}</b></p>'
        f"{binned_table_html(image_rejections.binned(by_drafter))}{listed}</div>"
    )


def dependence_html(batch) -> str:
    """The rejection rate where the answer token depends on the image (the image at least doubles
    the target's p there: its ablation) and where it does not, per drafter, with counts; '' where
    no run's ablation was read."""
    if batch is None or not batch.runs:
        return ""
    rows = image_rejections.by_dependence(_by_drafter(batch))
    if not any(r["drafted"] for r in rows):
        return ""
    body = [_rate_row(d, rows) for d in dict.fromkeys(r["drafter"] for r in rows)]
    return (
        '<table class="an-rej an-attn an-dependence"><caption>Rejection rate where the answer token depends '
        "on the image (blanking the image at least halves the target's probability of it) and where it does "
        "not (rejected / drafted)</caption><tr><th>drafter</th><th>image-dependent</th><th>independent</th></tr>"
        f"{''.join(body)}</table>"
    )


# The page's script for the links (joined to `text.JS`): select that run's row of the runs table.
JS = """
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("a.an-trace-link");
    if (!link) return;
    event.preventDefault();
    const rows = document.querySelectorAll("#an-runs tbody tr");
    const row = [...rows].find((tr) => tr.querySelector("td") && tr.querySelector("td").textContent.trim() === link.dataset.run);
    if (row) { row.scrollIntoView({ block: "center" }); row.querySelector("td").click(); }
  });
"""
