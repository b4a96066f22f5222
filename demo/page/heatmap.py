"""Where the target looked: its attention on the image, as an outlined map on a copy of the picture
that stays beside the lane's tokens, for the token hovered, focused or opened (`JS`). Pure
functions of `Trace.image_attention`: no model, no logits."""

from __future__ import annotations

import html
import json

from demo.engine.events import Trace

FLOOR = 0.05  # a map whose most-attended cell holds less than this is drawn faint: the token looked elsewhere
MARKED = 0.3  # a cell is outlined where it holds at least this share of the map's peak


def cell_style(value: float, peak: float) -> str:
    """A cell's mark: no tint, an outline (dark inside a light one, seen on any colour) from 1 to 4 px
    as value / max(peak, FLOOR) goes from MARKED to 1; none below MARKED."""
    v = value / max(peak, FLOOR)
    if v < MARKED:
        return "box-shadow:none"
    w = 1 + round(3 * (v - MARKED) / (1 - MARKED))
    return f"box-shadow:inset 0 0 0 {w}px rgba(0,0,0,.9),inset 0 0 0 {w + 1}px rgba(255,255,255,.9)"


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
    return (
        '<div class="hm-legend" aria-hidden="true"><span class="hm-key thin"></span> some · '
        '<span class="hm-key thick"></span> the most of the token\'s attention on the image '
        f"(faint below {FLOOR:.0%} on any cell)</div>"
    )


def figure_html(trace: Trace) -> str:
    """The copy of the input image the lane's maps are drawn on, beside its tokens (the script fills it)."""
    attention = trace.image_attention
    if attention is None or attention.unavailable or not trace.tokens:
        return ""
    return '<figure class="hm-figure" aria-hidden="true"><img class="hm-img" alt=""><div class="hm-overlay"></div></figure>'


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
        '<p class="hm-how">Where the target looked when it wrote the token, outlined on the copy of the image '
        f"beside the tokens: hover or focus a token, or open its round, to see its map (mean over heads of layer{'s' if len(attention.layers) > 1 else ''} "
        f"{layers}; a {attention.rows} × {attention.cols} grid over the image).</p></div></div>"
    )


# The page's script for the heatmap (joined to `text.JS`): redraw a panel's heatmap for a token.
JS = """
  const mark = (v) => {  // cell_style's rule: an outline from 1 to 4 px above MARKED of the peak, no tint
    if (v < 0.3) return "none";
    const w = 1 + Math.round(3 * (v - 0.3) / 0.7);
    return `inset 0 0 0 ${w}px rgba(0,0,0,.9),inset 0 0 0 ${w + 1}px rgba(255,255,255,.9)`;
  };
  // The input image a lane's map belongs to: the Race tab's, or the Analysis tab's for its trace.
  const inputImage = (map) => document.querySelector(map.closest("#an-trace") ? "#an-image img" : "#image img");
  // The lane's copy of the image, beside its tokens, with its grid of cells.
  const overlay = (map) => {
    const figure = map.closest(".panel") && map.closest(".panel").querySelector(".hm-figure");
    const img = inputImage(map);
    if (!figure || !img || !img.src) return null;
    const copy = figure.querySelector(".hm-img");
    if (copy.src !== img.src) copy.src = img.src;
    const grid = figure.querySelector(".hm-overlay");
    const rows = Number(map.dataset.rows), cols = Number(map.dataset.cols);
    if (grid.childElementCount !== rows * cols) {
      grid.replaceChildren();
      grid.style.gridTemplateColumns = `repeat(${cols},1fr)`;
      grid.style.gridTemplateRows = `repeat(${rows},1fr)`;
      for (let k = 0; k < rows * cols; k++) grid.appendChild(document.createElement("span")).className = "hm-cell";
    }
    return grid;
  };
  const paint = (map, i) => {
    const maps = JSON.parse(map.dataset.maps), captions = JSON.parse(map.dataset.captions);
    if (!(i < maps.length)) return;
    const grid = overlay(map);
    const peak = Math.max(0.05, ...maps[i]);  // FLOOR: a token that looked elsewhere stays faint
    if (grid) grid.querySelectorAll(".hm-cell").forEach((cell, k) => { cell.style.boxShadow = mark(maps[i][k] / peak); });
    map.querySelector(".hm-caption").textContent = captions[i];
    map.dataset.shown = String(i);
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
  // Every lane's map, drawn once it arrives (a new race's panels replace the old ones, copies and all).
  const fill = () => document.querySelectorAll(".panel .heatmap").forEach((map) => {
    const grid = overlay(map);
    if (grid && !grid.dataset.drawn) { grid.dataset.drawn = "1"; paint(map, Number(map.dataset.shown)); }
  });
  new MutationObserver(fill).observe(document.body, { childList: true, subtree: true });
"""
