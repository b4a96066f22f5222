"""report.html (`write(out)`): the Analysis tab's charts, sentences and tables over a batch's files,
one self-contained Plotly page: every bin and rate with its counts and 95% Wilson interval, the
drafters compared on the examples every one of them finished, the errors listed."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from demo.page.analysis import charts, opened, view

STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0;display:block;overflow-x:auto;max-width:100%}td,th{border:1px solid #ddd;padding:3px 6px}
.charts>div{width:100%}.n{color:#666}"""


def _table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, escape=True, border=0, na_rep="–")


def write(out: str | Path) -> Path:
    out = Path(out)
    batch = opened.read(out)
    sums = view.summaries(batch)
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
    errors = pd.read_parquet(out / "errors.parquet") if (out / "errors.parquet").exists() else pd.DataFrame()
    figures = [charts.category_figure(sums), charts.position_figure(sums)]
    plots = "".join(
        f"<div>{f.to_html(full_html=False, include_plotlyjs=i == 0, config={'responsive': True})}</div>"
        for i, f in enumerate(figures)
    )
    workers = manifest.get("workers", {})
    head = (
        f"<h1>Batch analysis: {html.escape(batch.preset)}, {', '.join(map(html.escape, batch.drafters))}</h1>"
        f'<p class="n">{len({r.example for r in batch.runs})} examples decoded ({batch.decoding}, γ = {batch.gamma}), '
        f"{len(errors)} could not be used; {len(workers.get('pids', []))} worker processes; "
        f"{html.escape(manifest.get('start', ''))} to {html.escape(manifest.get('end', ''))}.</p>"
    )
    parts = [
        head,
        view.headline_html(batch, sums),
        f'<div class="charts">{plots}</div>',
        "<h2>Most rejected words</h2>",
        _table(view.words_table(sums)),
    ]
    if view.several_languages(batch):
        parts += ["<h2>By language</h2>", _table(view.languages_table(batch))]
    parts += ["<h2>Runs</h2>", _table(view.runs_table(batch, multilingual=view.several_languages(batch)))]
    if len(errors):
        parts += ["<h2>Examples that could not be used</h2>", _table(errors[["example", "source", "reason"]])]
    page = f'<!doctype html><html><head><meta charset="utf-8"><title>Batch analysis</title><style>{STYLE}</style>'
    page += f'<meta name="viewport" content="width=device-width"></head><body>{"".join(parts)}</body></html>'
    path = out / "report.html"
    path.write_text(page)
    return path
