"""Where the target looked: its attention on the image, as a heatmap over the uploaded picture.

A lane's panel ends with this section once the run's image attention was read
(`Trace.image_attention`): the picture with a grid of cells over it, each cell tinted by the
share of the token's attention that fell on it (cividis, a colour-blind-safe map, with its
legend), and "x% of the target's attention on the image" for the token shown. It first shows
the first rejected draft's position (the target's resampled token there was decided by that
attention), else the token that looked at the image most. Hovering or focusing a token, or
opening its round in the block view, shows that token's map (the page's script, `text.JS`,
redraws the cells from the data attributes here); the picture is the page's own uploaded image,
which the script puts under the grid. Pure functions: no model, no cache, no logits.
"""

from __future__ import annotations

import html
import json

from demo.engine.events import Trace

# cividis (Nuñez et al. 2018) at 0, 0.25, 0.5, 0.75, 1: readable with every common colour-vision deficiency
CIVIDIS = ((0, 34, 78), (61, 77, 110), (124, 123, 120), (188, 175, 111), (253, 231, 55))


def colour(v: float) -> tuple[int, int, int]:
    """cividis at v in [0, 1], linearly between its stops."""
    v = min(1.0, max(0.0, v)) * (len(CIVIDIS) - 1)
    k = min(int(v), len(CIVIDIS) - 2)
    a, b, f = CIVIDIS[k], CIVIDIS[k + 1], v - k
    return tuple(round(x + (y - x) * f) for x, y in zip(a, b))


FLOOR = 0.05  # a map whose most-attended cell holds less than this is drawn faint: the token looked elsewhere


def cell_style(value: float, peak: float) -> str:
    """A cell's tint: cividis of value / max(peak, FLOOR), more opaque where more attention fell."""
    v = value / max(peak, FLOOR)
    r, g, b = colour(v)
    return f"background:rgba({r},{g},{b},{0.25 + 0.6 * v:.2f})"


def shown_token(trace: Trace) -> int:
    """The token the section shows first: the first rejection's position, else the token whose
    attention was most on the image."""
    rejected = next((t.index for t in trace.tokens if t.kind == "resampled"), None)
    if rejected is not None:
        return rejected
    shares = trace.image_attention.image
    return max(range(len(shares)), key=shares.__getitem__)


def caption(trace: Trace, index: int) -> str:
    """'#7 " green" (the drafter's " red" rejected here): 24% of the target's attention on the image'."""
    tok = trace.tokens[index]
    said = json.dumps(tok.text, ensure_ascii=False)
    rejected = (
        f" (the drafter's {json.dumps(tok.rejection.text, ensure_ascii=False)} rejected here)" if tok.rejection else ""
    )
    share = trace.image_attention.image[index]
    return f"#{index} {said}{rejected}: {share:.0%} of the target's attention on the image"


def legend_html() -> str:
    stops = ", ".join(f"rgb{colour(k / 8)}" for k in range(9))
    return (
        '<div class="hm-legend" aria-hidden="true"><span>0</span>'
        f'<span class="hm-bar" style="background:linear-gradient(to right, {stops})"></span>'
        f'<span class="hm-peak">the most on one cell (faint below {FLOOR:.0%})</span></div>'
    )


def section_html(trace: Trace) -> str:
    """The heatmap section of a lane's panel, or the sentence saying why there is none."""
    attention = trace.image_attention
    if attention is None:
        return ""
    if attention.unavailable or not trace.tokens:
        why = attention.unavailable or "The answer is empty."
        return f'<div class="heatmap-note" role="note">No attention heatmap: {html.escape(why)}</div>'
    n = min(len(trace.tokens), len(attention.maps))
    shown = shown_token(trace)
    cells = attention.maps[shown]
    peak = max(cells)
    grid = "".join(f'<span class="hm-cell" style="{cell_style(v, peak)}"></span>' for v in cells)
    captions = [caption(trace, i) for i in range(n)]
    layers = ", ".join(map(str, attention.layers))
    data = (
        f'data-rows="{attention.rows}" data-cols="{attention.cols}" data-shown="{shown}" '
        f'data-maps="{html.escape(json.dumps([list(m) for m in attention.maps[:n]]), quote=True)}" '
        f'data-captions="{html.escape(json.dumps(captions, ensure_ascii=False), quote=True)}"'
    )
    return (
        f'<div class="heatmap" {data}>'
        '<div class="hm-figure" role="img" aria-label="the uploaded image with the target\'s attention over it">'
        '<img class="hm-image" alt="">'
        f'<div class="hm-grid" style="grid-template-columns:repeat({attention.cols},1fr);'
        f'grid-template-rows:repeat({attention.rows},1fr)">{grid}</div></div>'
        f'<div class="hm-text"><p class="hm-caption" aria-live="polite">{html.escape(captions[shown])}</p>'
        f"{legend_html()}"
        '<p class="hm-how">Where the target looked when it wrote the token: hover or focus a token, or open '
        f"its round, to see its map (mean over heads of layer{'s' if len(attention.layers) > 1 else ''} {layers}; a {attention.rows} × {attention.cols} "
        "grid over the image).</p></div></div>"
    )


# The page's script for the heatmap (joined to `text.JS`): redraw a panel's heatmap for a token.
JS = """
  const cividis = [[0, 34, 78], [61, 77, 110], [124, 123, 120], [188, 175, 111], [253, 231, 55]];
  const tint = (v) => {
    const x = Math.min(1, Math.max(0, v)) * 4, k = Math.min(Math.floor(x), 3), f = x - k;
    const c = cividis[k].map((a, j) => Math.round(a + (cividis[k + 1][j] - a) * f));
    return `rgba(${c[0]},${c[1]},${c[2]},${(0.25 + 0.6 * v).toFixed(2)})`;
  };
  const picture = (map) => {
    const img = map.querySelector(".hm-image");
    if (img.getAttribute("src")) return;
    const source = document.querySelector(map.closest("#an-trace") ? "#an-image img" : "#image img");
    if (source && source.src) img.src = source.src;
  };
  const showMap = (tok) => {
    const panel = tok && tok.closest(".panel");
    const map = panel && panel.querySelector(".heatmap");
    if (!map) return;
    picture(map);
    const i = Number(tok.dataset.index);
    const maps = JSON.parse(map.dataset.maps), captions = JSON.parse(map.dataset.captions);
    if (!(i < maps.length)) return;
    const peak = Math.max(0.05, ...maps[i]);  // FLOOR: a token that looked elsewhere stays faint
    map.querySelectorAll(".hm-cell").forEach((cell, k) => { cell.style.background = tint(maps[i][k] / peak); });
    map.querySelector(".hm-caption").textContent = captions[i];
    map.dataset.shown = String(i);
  };
  const onToken = (event) => {
    const tok = event.target.closest && event.target.closest(".tok[data-index]");
    if (tok) showMap(tok);
  };
  document.addEventListener("mouseover", onToken);
  document.addEventListener("focusin", onToken);
  document.addEventListener("toggle", (event) => {
    const row = event.target;
    if (!row.matches || !row.matches("details.round-d[data-round]") || !row.open) return;
    const panel = [...document.querySelectorAll(".panel[data-blocks]")].find((p) => {
      const view = document.getElementById(p.dataset.blocks);
      return view && view.contains(row);
    });
    const round = row.dataset.round;
    const toks = panel ? panel.querySelectorAll(`.tok[data-round="${round}"]`) : [];
    const rejected = panel && panel.querySelector(`.tok-resampled[data-round="${round}"]`);
    showMap(rejected || toks[toks.length - 1]);
  }, true);
  const fill = () => document.querySelectorAll(".heatmap").forEach(picture);
  new MutationObserver(fill).observe(document.body, { childList: true, subtree: true });
"""
