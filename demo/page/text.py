"""The page's words and looks: its header, the timing and "How it works" texts, CSS and theme.

Gradio 6 takes the theme, CSS and script at launch (`demo.page.server.launch` passes them).
"""

from __future__ import annotations

import re

import gradio as gr

from demo import ROOT
from demo.page import attention_view, charts, heatmap

# The page's stylesheet (token panels, block views, trees, the Analysis tab): a static asset,
# read once here.
CSS = (ROOT / "assets" / "page.css").read_text(encoding="utf-8")
THEME = gr.themes.Default(primary_hue="teal", neutral_hue="slate")

# The page's one script: a click on (or Enter at) a token of a speculative lane's panel opens that
# token's round in the lane's block view (the panel names the view: data-blocks), opening the
# view's accordion first if it is closed, and moves the focus there.
JS = (
    """
() => {
  const open = (tok) => {
    const panel = tok.closest(".panel[data-blocks]");
    const round = tok.dataset.round;
    if (!panel || !round || round === "0") return false;
    const view = document.getElementById(panel.dataset.blocks);
    const row = view && view.querySelector(`details.round-d[data-round="${round}"]`);
    if (!row) return false;
    const accordion = view.closest("#blocks-accordion, #blocks2-accordion");
    const toggle = accordion && accordion.querySelector(".label-wrap");
    if (toggle && !toggle.classList.contains("open")) toggle.click();
    row.open = true;
    // an accordion that was closed shows the row a few frames later: retry until it takes focus
    const summary = row.querySelector("summary");
    const focus = (tries) => {
      row.scrollIntoView({ block: "start" });
      summary.focus({ preventScroll: true });
      if (document.activeElement !== summary && tries > 0) setTimeout(() => focus(tries - 1), 50);
    };
    requestAnimationFrame(() => focus(40));
    return true;
  };
  document.addEventListener("click", (event) => {
    const tok = event.target.closest && event.target.closest(".tok");
    if (tok) open(tok);
  });
  document.addEventListener("keydown", (event) => {
    const tok = event.key === "Enter" && event.target.closest && event.target.closest(".tok");
    if (tok && open(tok)) event.preventDefault();
  });
"""
    + heatmap.JS
    + attention_view.JS
    + charts.JS
    + "}\n"
)  # hover, focus or an opened round redraws the lane's heatmap; a dropped chart is purged

# The Stop button's click, in the browser before the server hears of it: the button says so at once.
# An update of the button's own value (a browser-only event), so Gradio knows the label it shows: the
# run's last update, "Stop", then changes it back. (Writing the button's text in the page instead
# left "Stopping…" in every later race: Gradio, its value still "Stop", never wrote the label again.)
STOPPING_JS = """
() => ({"__type__": "update", "value": "Stopping…", "interactive": false})
"""


TIMING = """**How the race is timed.** Both runs decode on this machine, taking turns on one thread.
Each has its own clock that runs only while it computes; the page always advances whichever run
has used less compute so far, so the race you watch is the race that was measured. Drawing the
page and the network are on neither clock."""

HOW_IT_WORKS = r"""
**Speculative decoding** (Leviathan et al. 2023; for multimodal models, Gagrani et al. 2024).
`p` is the target's next-token distribution (the model that sees the image), `q` the drafter's.
Each round:

1. **Draft.** The small drafter proposes γ tokens, one at a time: x₁ … xᵧ with probabilities q.
   A *text-only* drafter never sees the image; an *image-aware* one does.
2. **Verify.** One target forward over the last token plus the γ drafts gives p at every draft
   position and one more, the price of about one target step on a GPU.
3. **Accept.** Greedy: a draft is accepted while it equals the target's argmax. Sampling: draft x
   is accepted with probability min(1, p(x)/q(x)).
4. **Correct.** At the first rejection the target samples its own token from
   norm(max(0, p − q)) (greedy: its argmax): a <span style="color:#D55E00">resampled</span> token.
   If all γ were accepted, it adds a <span style="color:#0072B2">bonus</span> token from p for free.

So every round costs one target forward and yields between 1 and γ+1 tokens, and the output has
exactly the target's distribution: greedy outputs are identical to plain decoding (the badge checks
this on every run), and sampled outputs are distributed identically.

**Adaptive draft length** (the checkbox): the drafter ends a round's drafting early, before γ,
wherever its most likely next token has probability below the threshold, so it wastes fewer
drafts where it is unsure; verification is unchanged, so the output is exactly the same.

**The numbers** (each computed from the run's events, shown beside its formula in the panel):

| | formula | meaning |
|---|---|---|
| τ (block efficiency) | tokens after the prefill / target forwards | 1 for plain decoding, at most γ+1 |
| α (acceptance rate) | accepted drafts / drafted tokens | how often the drafter guessed right |
| MBSU (memory-bound speedup) | τ / (1 + d·c), d = drafts made per round, c = drafter / target params | speedup if a forward cost only reading its weights |
| wall-clock speedup | SPD decode tokens/s / AR decode tokens/s | what this machine actually measured |

"Drafted" means the same everywhere on the page: every token the drafter proposed, whether the target
then checked it or not. A token tree proposes several branches a round: its τ and α count the branch
the target walked (as a chain would), and its stats say how many nodes it proposed and α per node.

**The headline: two speedups.** The first is a projection, named as one: this race's τ and rounds
priced at step costs measured for a 7B LLaVA with a 68M drafter on an NVIDIA H200 (a verify of γ+1
tokens costs 1.07–1.26 single target steps T1 for γ = 1 … 8, a drafter step 0.011 T1; prompt
lookup's step costs nothing, layer-skip's the share of the target it runs). It is counted, not
timed, so a rerun reads the same; where it rests on something not measured there (a token tree's
verify wider than 9 tokens, a drafter whose step was never timed at that scale) it says so. The
second is what this machine measured, as a range: the race's rounds at its own step costs (each the
lower quartile of its steps), with and without the host's part of each round. The proof section's
time split reads the same step costs. Everything else (the wall clock, MBSU, the worked figures) is
under "How these are computed" and in the downloaded trace.

**CPU versus GPU.** On a GPU a forward over γ+1 tokens costs about as much as over one (decoding is
memory-bound), so the speedup approaches MBSU. On a CPU a wider forward costs more, and the
drafter's steps are not free either. A busy machine moves this machine's figures from one rerun to
the next; the projection does not move.

**Sampling.** Temperature divides the logits (lower: more deterministic), top-p keeps the smallest set of
tokens whose probability reaches p, and both warp p and q the same way. The seed fixes the random
numbers, so a race can be repeated exactly. The two runs still write different text under one seed: they
use their random numbers differently (SPD draws the drafts, a u per draft and the residuals; AR one draw
per token). What speculative sampling guarantees is the law: every answer has exactly the probability the
target gives it; the project's tests check this by counting 3,000 runs against the target's own
probabilities. Open a round in the block view to see p, q, min(1, p/q), the draw u, and the residual.

**The γ sweep.** After a greedy race the drafter replays the target's answer at γ = 1 … 10 (no target
forward: in greedy mode the target's verdicts are read off its own answer), giving τ, α and MBSU for each
γ, exact at the race's own γ, the speedup at the paper's scale (whose peak is the rule of thumb's best
γ: from exact counts, so it does not move between reruns) and, dotted, this machine's from this
race's measured step costs, with its own best γ. A sampled race has no sweep.
Under it, a table replays the same answer at the race's γ with every drafting strategy the preset offers
(each model drafter, its token tree, prompt lookup, layer-skip): τ and α exact, each drafter step timed in
its replay, c, MBSU and the predicted speedup, sorted by the last; the race's own row is marked.

**Languages.** A drafter is accepted only where it writes what the target would, so a question in
another language changes acceptance: the English-only text drafter, at γ = 4, makes τ = 3.67 on
English questions but 1.03 on German and 1.00 on Chinese ones (8 held-out questions each, greedy;
the project's README tells how to measure it), because it never learnt
German and lacks the Chinese tokens; the German and Chinese drafters, trained on the target's own
answers in their language, make 3.02 and 3.38 there. So the page picks the question's language's
drafter.

**Inputs.** An image is required (PNG, JPEG, GIF, WebP, BMP or TIFF, at most 10 MiB and 4096 × 4096
pixels; animated GIFs use their first frame, transparency is shown on white). Questions may be up
to 4,000 characters, and the question, image and answer must fit the model's context.
"""


# A sentence for whoever deploys the page, not for its visitors: a file path, a module, a command
# line, an environment variable, the model cache.
DEVELOPER = re.compile(r"python -m|DEMO_|\b[\w./-]+\.(?:md|py)\b|\bdemo\.[a-z_]+|Hugging Face cache")
ABSENT = "Its models are not on this machine; the project's README says how to add them."


def for_visitors(reason: str) -> str:
    """`reason` without its sentences for developers (`DEVELOPER`), or ABSENT where none is left."""
    kept = [part for part in re.split(r"(?<=[.;])\s+", reason) if not DEVELOPER.search(part)]
    return " ".join(kept) or ABSENT


def header() -> str:
    return (
        '<div id="title"><h1>Speculative decoding, live</h1><p>Upload an image, ask a question, and '
        "watch a small drafter plus the target race the target alone. Every token is coloured by "
        "where it came from; hover or focus one for its probabilities.</p></div>"
    )
