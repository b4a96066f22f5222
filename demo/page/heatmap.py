"""Where the target looked: its attention on the image, as a heatmap over the uploaded picture.

A lane's panel ends with this section once the run's image attention was read
(`Trace.image_attention`): "x% of the target's attention on the image" for the token shown, the
legend, and every token's map as data. The page's script (`JS`, joined to `text.JS`) lays a grid
of cells over the input image itself (the Race tab's, or the Analysis tab's for its trace), each
cell tinted by the share of the token's attention that fell on it (cividis, a colour-blind-safe
map; `cell_style` is its rule). It first shows the first rejected draft's position (the target's
resampled token there was decided by that attention), else the token that looked at the image
most; hovering or focusing a token, or opening its round in the block view, shows that token's
map. Pure functions: no model, no cache, no logits.
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
    """The heatmap section of a lane's panel (the shown token's caption, the legend, and the maps
    the page's script draws over the input image itself), or the sentence saying why there is none."""
    attention = trace.image_attention
    if attention is None:
        return ""
    if attention.unavailable or not trace.tokens:
        why = attention.unavailable or "The answer is empty."
        return f'<div class="heatmap-note" role="note">No attention heatmap: {html.escape(why)}</div>'
    n = min(len(trace.tokens), len(attention.maps))
    shown = shown_token(trace)
    captions = [caption(trace, i) for i in range(n)]
    layers = ", ".join(map(str, attention.layers))
    data = (
        f'data-rows="{attention.rows}" data-cols="{attention.cols}" data-shown="{shown}" '
        f'data-maps="{html.escape(json.dumps([list(m) for m in attention.maps[:n]]), quote=True)}" '
        f'data-captions="{html.escape(json.dumps(captions, ensure_ascii=False), quote=True)}"'
    )
    return (
        f'<div class="heatmap" {data}>'
        f'<div class="hm-text"><p class="hm-caption" aria-live="polite">{html.escape(captions[shown])}</p>'
        f"{legend_html()}"
        '<p class="hm-how">Where the target looked when it wrote the token, drawn over the input image: hover or '
        f"focus a token, or open its round, to see its map (mean over heads of layer{'s' if len(attention.layers) > 1 else ''} "
        f"{layers}; a {attention.rows} × {attention.cols} grid over the image).</p></div></div>"
    )


# The page's script for the heatmap (joined to `text.JS`): redraw a panel's heatmap for a token.
JS = """
  const cividis = [[0, 34, 78], [61, 77, 110], [124, 123, 120], [188, 175, 111], [253, 231, 55]];
  const tint = (v) => {
    const x = Math.min(1, Math.max(0, v)) * 4, k = Math.min(Math.floor(x), 3), f = x - k;
    const c = cividis[k].map((a, j) => Math.round(a + (cividis[k + 1][j] - a) * f));
    return `rgba(${c[0]},${c[1]},${c[2]},${(0.25 + 0.6 * v).toFixed(2)})`;
  };
  // The input image a lane's map belongs to: the Race tab's, or the Analysis tab's for its trace.
  const inputImage = (map) => document.querySelector(map.closest("#an-trace") ? "#an-image img" : "#image img");
  // The grid over the input image itself, laid on the picture's drawn box (object-fit: contain).
  const overlay = (map) => {
    const img = inputImage(map);
    if (!img || !img.naturalWidth) return null;
    const host = img.parentElement;
    if (getComputedStyle(host).position === "static") host.style.position = "relative";
    let grid = host.querySelector(":scope > .hm-overlay");
    const rows = Number(map.dataset.rows), cols = Number(map.dataset.cols);
    if (!grid || grid.childElementCount !== rows * cols) {
      if (grid) grid.remove();
      grid = document.createElement("div");
      grid.className = "hm-overlay";
      grid.setAttribute("aria-hidden", "true");
      grid.style.gridTemplateColumns = `repeat(${cols},1fr)`;
      grid.style.gridTemplateRows = `repeat(${rows},1fr)`;
      for (let k = 0; k < rows * cols; k++) grid.appendChild(document.createElement("span")).className = "hm-cell";
      host.appendChild(grid);
    }
    const w = img.clientWidth, h = img.clientHeight;
    const scale = Math.min(w / img.naturalWidth, h / img.naturalHeight);
    const dw = img.naturalWidth * scale, dh = img.naturalHeight * scale;
    Object.assign(grid.style, {
      left: `${img.offsetLeft + (w - dw) / 2}px`, top: `${img.offsetTop + (h - dh) / 2}px`,
      width: `${dw}px`, height: `${dh}px`,
    });
    return grid;
  };
  const paint = (map, i) => {
    const maps = JSON.parse(map.dataset.maps), captions = JSON.parse(map.dataset.captions);
    if (!(i < maps.length)) return;
    const grid = overlay(map);
    const peak = Math.max(0.05, ...maps[i]);  // FLOOR: a token that looked elsewhere stays faint
    if (grid) grid.querySelectorAll(".hm-cell").forEach((cell, k) => { cell.style.background = tint(maps[i][k] / peak); });
    map.querySelector(".hm-caption").textContent = captions[i];
    map.dataset.shown = String(i);
    if (grid) grid.dataset.lane = map.closest(".panel") ? map.closest(".panel").className : "";
  };
  const showMap = (tok) => {
    const panel = tok && tok.closest(".panel");
    const map = panel && panel.querySelector(".heatmap");
    if (map) paint(map, Number(tok.dataset.index));
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
  // A new race's first lane draws its shown token over the image; a race without maps takes it away.
  let drawn = null;
  const fill = () => {
    const first = document.querySelector(".panel .heatmap");
    if (first && first !== drawn) { drawn = first; paint(first, Number(first.dataset.shown)); }
    if (!first && drawn) { drawn = null; document.querySelectorAll(".hm-overlay").forEach((g) => g.remove()); }
  };
  new MutationObserver(fill).observe(document.body, { childList: true, subtree: true });
  window.addEventListener("resize", () => { if (drawn) paint(drawn, Number(drawn.dataset.shown)); });
"""
