"""The race's two speedups and how they are computed: the projection (this race's τ and rounds priced
at step costs measured for a 7B LLaVA on an H200, named as a projection) and the speedup measured
on this machine as a range, with a warning where a busy machine hit a lane's clock."""

from __future__ import annotations

import html
import math

from demo.engine import metrics, scale
from demo.engine.events import Trace

READING_BAR = 0.15  # the wall clock and the step costs disagreeing by more than this changes the reading


def steps(x: float) -> str:
    """A cost in single target steps, as the headline and the proof panel both print it."""
    return f"{x:.1f}" if abs(x) >= 0.1 else f"{x:.2f}"


def span(low: float, high: float) -> str:
    """A range as the page prints it: "×0.84–1.03", or one figure where both ends read the same."""
    return f"×{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"×{low:.2f}–{high:.2f}"


def clock_note(spd: Trace, ar: Trace, wall: float) -> str:
    """A warning, only where it changes the reading: the wall-clock ratio more than READING_BAR
    outside this machine's range from the step costs; it names the lane whose clock was hit."""
    s = metrics.split(spd, ar)
    if s is None or math.isnan(wall) or not ar.rounds:
        return ""
    if s["low"] * (1 - READING_BAR) <= wall <= s["high"] * (1 + READING_BAR):
        return ""
    if wall > s["high"]:
        ratio = metrics.decode_seconds(ar) / (len(ar.rounds) * s["t1"])
        hit = f"the autoregressive lane's clock was hit (its steps took {ratio:.1f}× their typical cost)"
    else:
        ratio = metrics.decode_seconds(spd) / (len(spd.rounds) * (s["draft"] + s["verify"] + s["other"]))
        hit = f"the speculative lane's clock was hit (its rounds took {ratio:.1f}× their typical cost)"
    text = (
        f"⚠ Timing is noisy: the wall clock reads ×{wall:.2f}, outside {span(s['low'], s['high'])} of the "
        f"step costs; {hit}. A rerun will time differently; τ and the projection will not."
    )
    return f' <span class="noisy" role="note">{html.escape(text)}</span>'


def _basis(spd: Trace) -> list[str]:
    """What the projection rests on that was not measured (`scale.unmeasured`)."""
    drafter = spd.start.drafter if spd.start else None
    return scale.unmeasured(drafter.kind if drafter else None, [metrics.verify_width(r) for r in spd.rounds])


def measured_html(spd: Trace, ar: Trace) -> str:
    """This machine's speedup as a range, with the step costs it rests on."""
    s = metrics.split(spd, ar)
    if s is None:
        return ""
    shown = span(s["low"], s["high"])
    ends = "" if "–" not in shown else "with and without the host's part of a round; "
    tree = spd.start is not None and spd.start.drafter is not None and spd.start.drafter.tree is not None
    what = f"a tree's verify of {s['width']:.1f} tokens" if tree else f"a verify of {s['width']:.1f} tokens"
    return (
        f'<span class="wall">measured on this machine: <b>{shown}</b> <small>({html.escape(ends)}{what} costs '
        f"{steps(s['verify'] / s['t1'])} single steps here, drafting {steps(s['draft'] / s['t1'])})</small></span>"
    )


def headline_html(spd: Trace, ar: Trace, wall: float, lane: str = "") -> str:
    """One lane's headline: the projection, named as one, with what it rests on; then the speedup
    measured on this machine, as a range. `lane`: the lane's name, when a race has several."""
    scaled = metrics.scaled_speedup(spd)
    if math.isnan(scaled):
        return ""
    who = f"{html.escape(lane)}: " if lane else ""
    basis = "".join(f"; {html.escape(b)}" for b in _basis(spd))
    return (
        f'<span class="headline">{who}<b>×{scaled:.2f}</b> projected <small>for {scale.SETTING}, from this race\'s '
        f"τ and step costs measured there{basis}</small></span>{measured_html(spd, ar)}"
        f'<span class="counts">τ = {metrics.tau(spd):.2f} · α = {metrics.alpha(spd):.2f}</span>'
    )


def why_html(spd: Trace, ar: Trace, wall: float, lane: str = "", warn: bool = True) -> str:
    """How the two figures are computed (a closed section): the projection round by round, this
    machine's range from its step costs, the wall clock and MBSU; and (with `warn`) `clock_note`."""
    s = metrics.split(spd, ar)
    if s is None or math.isnan(metrics.scaled_speedup(spd)):
        return ""
    tau = metrics.tau(spd)
    drafter = spd.start.drafter
    d = scale.draft_ratio(drafter.kind if drafter else None, metrics.param_ratio(spd))
    scaled_round = tau / metrics.scaled_speedup(spd)
    t1 = s["t1"] * 1000
    text = (
        f"{lane}Projected: a round makes {s['steps']:.1f} drafter steps at {d:.3g} T1 and verifies {s['width']:.1f} "
        f"tokens, {scaled_round:.2f} T1 in all, for τ = {tau:.2f} tokens, where the target alone writes one token "
        f"per T1: ×{tau:.2f} / {scaled_round:.2f}. On this machine a round costs {s['draft'] * 1000:.2f} ms of "
        f"drafting + {s['verify'] * 1000:.2f} ms of verify + {s['other'] * 1000:.2f} ms of the host's part, against "
        f"{t1:.2f} ms a token alone (each step cost the lower quartile of the race's steps): ×{s['low']:.2f} with "
        f"the host's part, ×{s['high']:.2f} without. The wall clock read ×{wall:.2f} "
        f"({metrics.tokens_per_second(spd):.1f} against {metrics.tokens_per_second(ar):.1f} tokens/s); "
        f"MBSU (τ over the drafter's share of the weights read) {metrics.mbsu_made(spd):.2f}."
    )
    warning = clock_note(spd, ar, wall) if warn else ""
    return f'<span class="why">{html.escape(text)}</span>{warning}'
