"""The paper's scale: a race's speedup at fixed step-cost ratios, a function of its τ alone.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import math

SOURCE = "an NVIDIA H200, 2026-12-04: shared/notes/gpu-2026-12-04.md, part 2 (python -m demo.lab.bench.gpu_check)"
SETTING = "a llava-1.5-7b-shaped target with a 68M drafter on an H200"
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


def ratios_text(gamma: int) -> str:
    """The ratios a race of this γ is priced at, in words, for the page."""
    return f"a verify of {gamma + 1} tokens costs {verify_ratio(gamma + 1):.2f} T1 and a drafter step {DRAFT_RATIO} T1"
