"""Events -> the page's teaching views: one annotated round, the round inspector (p and q at each
draft), the γ sweep's rule of thumb, and whether the answer matches an example's reference."""

from __future__ import annotations

import html
import math
import re

from demo.engine.detokenize import END_TOKENS
from demo.engine.events import RoundEvent, Trace
from demo.models import drafter_kinds
from demo.page import charts
from demo.session import rejections

CAUSAL = (
    "Why one forward checks every draft: the target reads the last token and the γ drafts together, and "
    "causal attention lets each position see only the tokens before it. So the logits at draft i are "
    "exactly what a token-by-token run would give after drafts 1 … i−1: one pass, γ+1 predictions."
)
# Why the acceptance rule keeps the target's distribution, in three lines (beta: the acceptance probability).
EXACT = (
    "Why the output is exactly the target's: a draft x comes with probability q(x) and is kept with "
    "probability min(1, p(x)/q(x)), so it is kept as x with probability min(p, q)(x).<br>"
    "It is rejected with probability 1 − β, where β = Σ min(p, q) is the acceptance probability; then the "
    "target draws from the residual norm(max(0, p − q)) = (p − min(p, q)) / (1 − β).<br>"
    "Together: P(x) = min(p, q)(x) + (1 − β)·residual(x) = min(p, q)(x) + p(x) − min(p, q)(x) = p(x). "
    "(Greedy is the case where p and q each put all their mass on one token.)"
)


# The page's one marker for the token that ends an answer: the answer panel draws the stop token
# (which has no text) with it, and the inspector and block view draw its spellings (<|end|>, </s>,
# <|im_end|>, … `END_TOKENS`) with it too.
END_MARK = '<span class="end" title="the token that ends the answer">end</span>'


def _t(text: str) -> str:
    """A token's text, quoted and escaped, spaces kept visible (the end marker for a stop token)."""
    return END_MARK if text in END_TOKENS else "‘" + html.escape(text.replace("\n", "↵")) + "’"


def _pick(trace: Trace, index: int | None = None) -> RoundEvent | None:
    """The round to annotate: round `index` when given; else one that accepted drafts and then
    rejected one, else any rejection, else the first round."""
    if index is not None:
        return next((r for r in trace.rounds if r.index == index), None)

    def rejected(r):
        return r.n_accepted < len(r.drafted_ids)

    for test in (lambda r: rejected(r) and r.n_accepted > 0, rejected, lambda r: True):
        found = next((r for r in trace.rounds if test(r)), None)
        if found is not None:
            return found
    return None


LOOKED = 0.35  # the attention share above which the target was looking at the image (docs/grounding.md)


def _share(share: float | None) -> str:
    return "" if share is None else f" ({share:.0%} of the target's attention was on the image there)"


def _image(share: float | None, needed: bool | None) -> str:
    """What the two readings of the image say at one token: attention (`share`) and ablation
    (`needed`: a blank image makes the token at least half as likely; None: not read). "The image
    decided it" only where the ablation says the token needed the image."""
    looked = None if share is None else f"the target put {share:.0%} of its attention on the image there"
    if needed is None:
        return "" if looked is None else f"; {looked}"
    if needed:
        return f"; {looked or 'the target'}{', and' if looked else ''} a blank image makes it far less likely, so the image decided it"
    if looked and share >= LOOKED:
        return f"; the target looked at the image here ({share:.0%}), but a blank image gives it about as likely, so the words before it had already decided it"
    return "; a blank image gives it about as likely: the words before it had already decided it"


def why_rejected(
    kind: str, category: str, share: float | None, draft: str, own: str, needed: bool | None = None
) -> str:
    """Why the target rejected a draft, from what the token is: its word's category (the target's
    answer there, `demo.session.rejections.at_rejection`) and the two readings of the image there
    (`_image`: the attention `share`, the ablation's `needed`). Punctuation, the end of the answer
    and the phrasing are never blamed on the image; only an image-grounded word (colour, shape,
    size, count, position, yes/no, an option letter) is."""
    if category == "punctuation" or (not draft.strip() and not own.strip()):
        return (
            f"a punctuation or spacing choice: the drafter put {_t(draft)} where the target puts {_t(own)}, "
            "which is how the two learned to phrase an answer, not something either reads in the image"
        )
    if category == "end" or draft in END_TOKENS or own in END_TOKENS:
        return (
            "where the answer ends is a matter of phrasing: the two disagreed on whether to stop here, not on the image"
        )
    if category in ("function", "template"):
        return (
            f"a {'function' if category == 'function' else 'phrasing'} word: the drafter's sentence pattern differs "
            "from the target's here, a matter of the words around it" + _share(share)
        )
    what = drafter_kinds.of(kind).teach
    said = "an option letter, which follows from what the image shows" if category == "letter" else f"a {category} word"
    return f"{_t(own)} is {said}, the kind the image shows, and {what}{_image(share, needed)}"


def _reason(spd: Trace, r: RoundEvent, rejected: str, own) -> str:
    """`why_rejected` for the rejection of round `r`, whose target token is `own` (None: not shown yet)."""
    kind = spd.start.drafter.kind
    if own is None:
        return why_rejected(kind, "template", None, rejected, "")
    _, category = rejections.at_rejection(spd, own.index)
    read = spd.ablation and not spd.ablation.get("unavailable") and spd.ablation["dependent"]
    needed = read[own.index] if read and own.index < len(read) else None
    return why_rejected(kind, category, spd.image_share(own.index), rejected, own.text, needed)


def round_reason(spd: Trace, r: RoundEvent) -> str | None:
    """Why round `r` of `spd` rejected its draft, one sentence (None: it rejected none), for the
    round's row in the block view, so that every rejected token opens its own reason."""
    if r.n_accepted >= len(r.drafted_ids) or spd.start is None or spd.start.drafter is None:
        return None
    own = next((t for t in spd.tokens if t.round == r.index and t.kind == "resampled"), None)
    reason = _reason(spd, r, r.drafted_texts[r.n_accepted], own)
    return f"Why {_t(r.drafted_texts[r.n_accepted])} was rejected: {reason[0].lower()}{reason[1:]}."


def annotated_round_html(spd: Trace, several: bool = False, index: int | None = None) -> str:
    """One round of this race (round `index`, else one `_pick` chooses), told step by step (before
    a run: what a round is). `several`: the race has more than one speculative lane, and `spd` is
    the first (the page says so)."""
    r = _pick(spd, index)
    if r is None or spd.start is None or spd.start.drafter is None:
        return (
            '<div class="how-round"><p><b>One round</b>: the small drafter guesses γ tokens; the target checks all '
            "of them in one forward, keeps the ones it would have written itself, and adds one token of its own. "
            "Run the race and one of its rounds is explained here.</p>"
            f'<p class="causal">{CAUSAL}</p><p class="causal exact">{EXACT}</p></div>'
        )
    drafter = spd.start.drafter
    proposed = " ".join(_t(t) for t in r.drafted_texts)
    who = f"{drafter.name} drafter" + ("" if drafter.name == drafter.kind else f", {drafter.kind}")
    if several:
        who += (
            "; the first speculative lane, whose γ sweep is below too: the second lane's rounds open in its block view"
        )
    marks = []
    for j, text in enumerate(r.drafted_texts):
        if j < r.n_accepted:
            marks.append(f'<span class="chip chip-ok">✓ {html.escape(text)}</span>')
        elif j == r.n_accepted:
            marks.append(f'<span class="chip chip-no">✗ {html.escape(text)}</span>')
    own = spd.tokens and next((t for t in spd.tokens if t.round == r.index and t.kind in ("resampled", "bonus")), None)
    own_text = own.text if own else ""
    n = len(r.drafted_ids)
    unchecked = n - r.n_accepted - 1
    if r.n_accepted < n:
        rejected = r.drafted_texts[r.n_accepted]
        arrow = f'<span class="chip chip-own chip-resampled">→ {html.escape(own_text)}</span>'
        told = (
            f"The target accepted {r.n_accepted} of {n}, rejected {_t(rejected)} and wrote {_t(own_text)} instead"
            + (
                f"; the {unchecked} draft{'s' if unchecked != 1 else ''} after it "
                f"{'were' if unchecked != 1 else 'was'} never used"
                if unchecked > 0
                else ""
            )
            + f": {_reason(spd, r, rejected, own)}."
        )
        if own is not None and own.rejection is not None:
            told += (
                f" The target gave {_t(rejected)} p = {own.rejection.p:.2f}, the drafter q = {own.rejection.q:.2f}; "
                f"{_t(own_text)} had p = {own.p:.2f}."
            )
    else:
        arrow = f'<span class="chip chip-own chip-bonus">+ {html.escape(own_text)}</span>'
        told = f"The target accepted all {n} drafts and added a bonus token {_t(own_text)} from the same forward."
    return (
        f'<div class="how-round"><p><b>Round {r.index} of this race</b> ({html.escape(who)}): the drafter proposed {proposed}.</p>'
        f'<p class="marks">{"".join(marks)}{arrow} <span class="plus">+{r.n_emitted} token{"s" if r.n_emitted != 1 else ""} for one target forward</span></p>'
        f'<p>{told}</p><p class="causal">{CAUSAL}</p><p class="causal exact">{EXACT}</p></div>'
    )


# --- the inspector ---------------------------------------------------------------------------------


def _bars(ranked, mark: str | None = None, colour: str = "p") -> str:
    rows = []
    for text, prob in ranked:
        hit = ' class="hit"' if mark is not None and text == mark else ""
        rows.append(
            f'<tr{hit}><td class="bt">{END_MARK if text in END_TOKENS else html.escape(text.replace(chr(10), "↵")) or "∅"}</td>'
            f'<td class="bar"><span class="fill fill-{colour}" style="width:{max(1.0, prob * 100):.0f}%"></span></td>'
            f'<td class="bp">{prob:.3f}</td></tr>'
        )
    return f'<table class="bars">{"".join(rows)}</table>'


def inspector_html(r: RoundEvent, greedy: bool) -> str:
    """A round opened: at each checked draft the top-k of p and q, min(1, p/q) (and u when
    sampling), and the law of the target's own token, its token marked."""
    d = r.detail
    if d is None:
        return ""
    cells = []
    for i, pos in enumerate(d.positions, start=1):
        if greedy:
            ratio = min(1.0, pos.p / pos.q) if pos.q > 0 else 1.0
            rule = (
                f"argmax match: {'yes' if pos.accepted else 'no'} (min(1, p/q) = {ratio:.3f}, the rule when sampling)"
            )
        else:
            rule = f"min(1, p/q) = {pos.accept_prob:.3f}, u = {pos.u:.3f}: " + (
                "u &lt; min(1, p/q), accepted" if pos.accepted else "u ≥ min(1, p/q), rejected"
            )
        verdict = "✓" if pos.accepted else "✗"
        cells.append(
            f'<div class="pos"><div class="pos-head">{verdict} draft {i}: {_t(pos.draft)} · p = {pos.p:.3f} · '
            f"q = {pos.q:.3f} · {rule}</div>"
            f'<div class="pq"><div><small>p (target)</small>{_bars(pos.top_p, pos.draft, "p")}</div>'
            f"<div><small>q (drafter)</small>{_bars(pos.top_q, pos.draft, 'q')}</div></div></div>"
        )
    rejected = len(d.positions) > 0 and not d.positions[-1].accepted
    if rejected and not greedy:
        law = "the residual norm(max(0, p − q)) at the rejection"
    elif rejected:
        law = "p at the rejection (greedy: the target's argmax)"
    else:
        law = "p after the last draft (the bonus)"
    cells.append(
        f'<div class="pos"><div class="pos-head">the target\'s token {_t(d.token)}, drawn from {law}: '
        f"probability {d.own_p:.3f}</div>{_bars(d.own, d.token, 'r')}</div>"
    )
    return f'<div class="inspector">{"".join(cells)}</div>'


def sampling_note_html(spd: Trace) -> str:
    """Why SPD and AR differ under one seed, and the test that checks the law."""
    if spd.start is None or spd.start.sampling.greedy:
        return ""
    return (
        '<div class="fact">Same seed, different text: the two runs use their random numbers differently (SPD draws '
        "q's samples, each u and the residuals; AR one draw per token), so they write different answers. What is "
        "the same is the law: every answer has the probability the target gives it (the project's tests check "
        "this by counting thousands of runs against the target's own probabilities).</div>"
    )


# --- the sweep's rule of thumb ------------------------------------------------------------------------


def rule_of_thumb(rows: list[dict], race_gamma: int, whose: str = "") -> str:
    """One sentence read off the sweep: the γ that the projection prefers (from the sweep's exact τ,
    so a rerun cannot move it) and the γ this machine's step costs prefer, and how τ and α move
    (`whose`: which lane's sweep it is, when a race has several)."""
    scored = [r for r in rows if not math.isnan(r.get("scaled_speedup", math.nan))]
    best, mine = charts.best_gamma(rows, "scaled_speedup"), charts.best_gamma(rows, "predicted_speedup")
    if best is None:
        return ""
    near = [r["gamma"] for r in scored if r["scaled_speedup"] >= 0.95 * best["scaled_speedup"]]
    first, last = rows[0], rows[-1]
    here = next((r for r in scored if r["gamma"] == race_gamma), None)
    text = (
        f"Rule of thumb for this prompt{whose}: projected, the speedup peaks at γ = {best['gamma']} "
        f"(×{best['scaled_speedup']:.2f}), "
        + (f"and γ = {min(near)}–{max(near)} is within 5% of it" if len(near) > 1 else "and no other γ comes within 5%")
    )
    if mine is not None:
        text += f"; on this machine it peaks at γ = {mine['gamma']} (×{mine['predicted_speedup']:.2f})"
    text += (
        f". From γ = {first['gamma']} to {last['gamma']} τ goes "
        f"{first['tau']:.2f} → {last['tau']:.2f} while α goes {first['alpha']:.2f} → {last['alpha']:.2f}."
    )
    if here is not None:
        text += f" This race used γ = {race_gamma}: ×{here['scaled_speedup']:.2f} projected"
        measured = here.get("predicted_speedup")
        text += f", ×{measured:.2f} on this machine." if measured is not None else "."
    return f'<div class="sweep-note">{html.escape(text)}</div>'


# --- is the target right? ------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    """The text's words, case and punctuation ignored, in any script: a run of Chinese characters is
    one word, so a character missing there is a difference (ASCII-only words dropped them all)."""
    return re.findall(r"\w+", text.casefold())


def reference_badge(ar: Trace, reference: str | None) -> str:
    """Beside the lossless badge: whether the target's own answer matches the example's reference
    (words compared exactly, in any language; case and punctuation ignored). Lossless means identical to the target, not correct."""
    if reference is None or ar.summary is None:
        return ""
    if _words(ar.summary.text) == _words(reference):
        return '<span class="badge badge-ref-ok">the target\'s answer matches the reference</span>'
    return (
        '<span class="badge badge-ref-no" title="Speculative decoding reproduces the target exactly; it does not '
        "make the target right\">the target's answer differs from the reference: lossless means identical to the "
        "target, not correct</span>"
    )
