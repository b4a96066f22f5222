"""The paper's scale: a race's projected speedup at fixed step-cost ratios, from its counts alone.

A speedup read off a shared CPU's clocks moves from one rerun to the next; priced at fixed ratios
it follows from τ and the rounds' drafter steps and verify widths, and repeats exactly. The ratios
were measured for the paper's setting (Gagrani et al. 2024: LLaVA 1.5 7B with a 68M drafter) on an
NVIDIA H200: T1 = 20.67 ms for one token, T(γ+1) for γ = 1..8
(VERIFY_MS), a 68M drafter step D = 0.235 ms (D/T1 = 0.011).

    verify_ratio(width), draft_ratio(kind, c), rounds_cost(pairs, d)   the pricing
    unmeasured(kind, widths)   what a projection rests on that was not measured, in words
"""

from __future__ import annotations

import math

SETTING = "a 7B LLaVA with a 68M drafter on an H200"
T1_MS = 20.67  # one target step over one token
VERIFY_MS = (22.17, 22.62, 22.39, 23.93, 26.06, 23.70, 22.35, 22.57)  # T(γ+1) for γ = 1..8
DRAFT_MS = 0.235  # one 68M drafter step, lean forward with CUDA graphs
DRAFT_RATIO = round(DRAFT_MS / T1_MS, 3)  # 0.011, as the note gives it


def verify_ratio(width: int) -> float:
    """T(width)/T1: a target forward over `width` tokens against one over a single token."""
    if width <= 1:
        return 1.0
    measured = [ms / T1_MS for ms in VERIFY_MS]
    return measured[width - 2] if width - 2 < len(measured) else max(measured)


# D/T1 of one step of each drafter kind, as its registration gives it (`demo.models.drafter_kinds`,
# which fills this); None: the share c of the target's parameters it runs.
STEP_RATIOS: dict[str, float | None] = {}


def draft_ratio(kind: str | None, c: float) -> float:
    """D/T1 of one drafter step of this kind of drafter (`c`: its parameters over the target's);
    a drafter of no registered kind is priced as the 68M drafter."""
    ratio = STEP_RATIOS.get(kind, DRAFT_RATIO)
    return ratio if ratio is not None else c if not math.isnan(c) else 1.0


def rounds_cost(steps_and_widths: list[tuple[int, int]], d: float) -> float:
    """A round's cost in T1 on average over (drafter steps, verify width) pairs: its drafter steps
    at d each plus its verify at its width (nan: no rounds)."""
    if not steps_and_widths:
        return math.nan
    return sum(n * d + verify_ratio(w) for n, w in steps_and_widths) / len(steps_and_widths)


WIDEST = len(VERIFY_MS) + 1  # the widest verify measured there (tokens)
UNMEASURED: set[str] = set()  # the kinds priced at the 68M drafter's step, never measured for them (their Kind says)


def unmeasured(kind: str | None, widths: list[int]) -> list[str]:
    """What the projection of rounds of these verify `widths`, drafted by `kind`, rests on that
    was not measured at the paper's scale (none: all of it was)."""
    said, wide = [], [w for w in widths if w > WIDEST]
    if wide:
        said.append(
            f"its verifies of {min(wide)}–{max(wide)} tokens are priced at the widest measured, {WIDEST} tokens "
            f"({max(verify_ratio(w) for w in range(2, WIDEST + 1)):.2f} T1): wider ones cost at least that, so "
            "the projection is at most this"
        )
    if kind in UNMEASURED:
        said.append(f"a {kind} drafter step is priced at the 68M drafter's ({DRAFT_RATIO} T1), not measured for it")
    return said
