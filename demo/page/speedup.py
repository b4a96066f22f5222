"""The race's headline and the "why" of its speedup, from its events and the cost models.

    headline_html(spd, ar, wall)   what the race decides exactly first (the speedup at the paper's
                                   fixed step-cost ratios, τ, α, MBSU: `metrics.scaled_speedup`),
                                   then what this machine measured, as a range over the rounds
    why_html(spd, ar, wall)        both figures worked out round by round, and `clock_note`
    measured_range(spd, ar, wall)  the measured range and whether it is inconclusive
    clock_note(spd, ar, wall)      a warning where a busy machine hit a lane's clock

Pure functions of `Trace`s and `demo.engine.metrics`, like `demo.page.teach`; no Gradio.
"""

from __future__ import annotations

import html
import math

from demo.engine import metrics, scale
from demo.engine.events import Trace

READING_BAR = 0.15  # the wall clock and the cost model disagreeing by more than this changes the reading


def model_speedup(spd: Trace, ar: Trace) -> float:
    """The page's headline: the cost model fed with this race's step costs (T1, T(γ+1), D), each the
    lower quartile of its steps (`metrics.STEP_QUANTILE`), over the rounds that ran. A busy machine
    slows some steps; the fast quarter holds where medians and wall clocks move."""
    c = metrics.costs(spd, ar)
    return math.nan if c is None else metrics.predicted_by_rounds(spd, c)


def _clock_hit(spd: Trace, ar: Trace, c: metrics.Costs, faster: bool) -> str:
    """Which lane's clock a busy machine hit: the autoregressive lane's when speculation reads
    `faster` on the wall clock than on the step costs, else the speculative lane's; with how much
    longer that lane took than its rounds at those costs."""
    if faster:
        ratio = metrics.decode_seconds(ar) / (len(ar.rounds) * c.t1)
        return (
            f"the autoregressive lane's clock was hit (its steps took {ratio:.1f}× their typical cost on average), "
            "so speculation looks faster than it is"
        )
    steps, _, verify = metrics.round_costs(spd, c)
    ratio = metrics.decode_seconds(spd) / (len(spd.rounds) * (steps * c.t_draft + verify))
    return (
        f"the speculative lane's clock was hit (its rounds took {ratio:.1f}× their typical cost on average), "
        "so speculation looks slower than it is"
    )


def clock_note(spd: Trace, ar: Trace, wall: float) -> str:
    """A warning, only where it changes the reading: the wall-clock ratio above the most the cost
    model allows with this race's step costs (a verify as cheap as one step), or more than
    READING_BAR away from the model's figure; it names the lane whose clock was hit."""
    c = metrics.costs(spd, ar)
    if c is None or math.isnan(wall) or not spd.rounds or not ar.rounds:
        return ""
    model = metrics.predicted_by_rounds(spd, c)
    steps, _, verify = metrics.round_costs(spd, c)
    ceiling = metrics.tau(spd) * c.t1 / (steps * c.t_draft + min(c.t1, verify))  # never below the model
    hit = _clock_hit(spd, ar, c, faster=wall > model)
    if wall > ceiling:
        text = (
            f"⚠ The wall clock reads ×{wall:.2f}, above ×{ceiling:.2f}, the most this race's step costs allow "
            f"(even with a verify as cheap as one step): {hit}."
        )
    elif abs(wall / model - 1) > READING_BAR:
        text = (
            f"⚠ Timing is noisy: the wall clock reads ×{wall:.2f}, {abs(wall / model - 1) * 100:.0f}% from the "
            f"×{model:.2f} of the step costs; {hit}. A rerun will measure differently; the headline above will not: it is counted, not timed."
        )
    else:
        return ""
    return f'<span class="noisy" role="note">{html.escape(text)}</span>'


def measured_range(spd: Trace, ar: Trace, wall: float) -> tuple[float, float, bool]:
    """The speedup measured on this machine as a range over the race's rounds (the per-round
    quartiles, `metrics.round_speedups`), and whether it is inconclusive: the range crosses 1, or
    a lane's clock was hit (`clock_note` has something to say)."""
    _, low, high = metrics.round_speedups(spd, ar)
    hit = bool(clock_note(spd, ar, wall))
    return low, high, hit or math.isnan(low) or low <= 1 <= high


def headline_html(spd: Trace, ar: Trace, wall: float, lane: str = "") -> str:
    """One lane's headline. First what the race decides exactly, counted from its tokens: the
    speedup at the paper's fixed step-cost ratios (`metrics.scaled_speedup`, a function of the
    rounds alone), τ, α and MBSU; a rerun of the same race reads the same. Second, the speedup
    measured on this machine, as a range over the race's rounds, called inconclusive where the
    range crosses 1 or a clock was hit. `lane`: the lane's name, when a race has several."""
    scaled = metrics.scaled_speedup(spd)
    if math.isnan(scaled):
        return ""
    who = f" {html.escape(lane)}" if lane else ""
    low, high, inconclusive = measured_range(spd, ar, wall)
    verdict = (
        "inconclusive: " + ("a clock was hit (below)" if clock_note(spd, ar, wall) else "the range crosses 1")
        if inconclusive
        else ("faster" if low > 1 else "slower") + " in every quartile of its rounds"
    )
    return (
        f'<span class="headline"><b>×{scaled:.2f}</b>{who} at the paper\'s scale · τ = {metrics.tau(spd):.2f} · '
        f"α = {metrics.alpha(spd):.2f} · MBSU = {metrics.mbsu_made(spd):.2f} "
        f"<small>(exact: counted from the race's tokens, the same on every rerun; the speedup prices its rounds "
        f"at the fixed step-cost ratios of {scale.SETTING}, {html.escape(scale.ratios_text(spd.gamma))}, "
        f"measured on {html.escape(scale.SOURCE)})</small></span>"
        f'<span class="wall">measured on this machine: ×{low:.2f}–{high:.2f} over the race\'s rounds, '
        f"{verdict} (wall clock ×{wall:.2f}: {metrics.tokens_per_second(spd):.1f} vs "
        f"{metrics.tokens_per_second(ar):.1f} tokens/s)</span>"
    )


def why_html(spd: Trace, ar: Trace, speedup: float, lane: str = "", warn: bool = True) -> str:
    """The paper-scale figure explained round by round, then this machine's: the cost model from
    this race's own step costs and the spread of the per-round estimate, and (with `warn`)
    `clock_note`. `lane`: the lane's name, said first, when a race has several."""
    c = metrics.costs(spd, ar)
    if c is None or math.isnan(speedup):
        return ""
    tau = metrics.tau(spd)
    # a round on average: drafter steps, verify width (a token tree's verify scores all its nodes) and cost
    steps, width, verify = metrics.round_costs(spd, c)
    drafter = spd.start.drafter
    d = scale.draft_ratio(drafter.kind if drafter else None, metrics.param_ratio(spd))
    scaled_round = tau / metrics.scaled_speedup(spd)  # a round's cost in T1 at the paper's ratios
    round_ms = (steps * c.t_draft + verify) * 1000
    model = tau * c.t1 * 1000 / round_ms  # metrics.predicted_by_rounds, from the figures the sentence shows
    mid, low, high = metrics.round_speedups(spd, ar)
    text = lane + (
        f"Why ×{tau / scaled_round:.2f} at the paper's scale: a round here makes {steps:.1f} drafter steps at "
        f"{d:.3g} T1 and verifies {width:.1f} tokens, {scaled_round:.2f} T1 in all, and yields τ = {tau:.2f} "
        f"tokens, where the target alone writes one token per T1: {tau:.2f} / {scaled_round:.2f}. "
        f"On this machine the same round costs {steps:.1f} × {c.t_draft * 1000:.2f} ms + a verify "
        f"{verify * 1000:.2f} ms = {round_ms:.1f} ms against {c.t1 * 1000:.2f} ms a token alone, so ×{model:.2f} "
        f"(a verify of {c.width or c.gamma + 1} tokens costs {c.t_verify / c.t1:.1f} single steps on a CPU; "
        "each figure is the lower quartile of the race's steps). "
        f"Per-round medians give ×{mid:.2f}, ×{low:.2f}–{high:.2f} between the rounds' quartiles."
    )
    warning = clock_note(spd, ar, speedup) if warn else ""
    return f'<span class="why">{html.escape(text)}</span>{warning}'
