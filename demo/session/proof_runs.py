"""The sampling law checked live for every surface: `check_law` prepares like a race and runs
`exactness.check` off every race's clock, in one accelerator call, returning plain data."""

from __future__ import annotations

from pathlib import Path

from demo.models import zerogpu
from demo.session import validate
from demo.session.request import Request

K_MAX = 3


def _prompts(request: Request, image_payload, uploads, progress=None):
    """The race's preparation, run to its end (its loading messages to `progress`): the `Prompts`."""
    from demo.session.race import prepare

    steps = prepare(request, image_payload, uploads, progress or (lambda fraction, message: None))
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value[2]


def _law_duration(request: Request, image_payload, uploads, k: int = 2, n: int = 200) -> int:
    from demo.session import budget

    return zerogpu.clamp(budget.law(request.preset, request.drafter, request.gamma, k, n).seconds)


@zerogpu.GPU(duration=_law_duration)
def check_law(request: Request, image_payload, uploads: str | Path, k: int = 2, n: int = 200, progress=None) -> dict:
    """The law of k tokens (`exactness.check`), drawn n times each way with the request's first
    drafter, γ and sampling settings (a greedy request's temperature and top-p sample), under the
    work budget like a race: fewer draws where n do not fit (`budget.law`, "shortened" says so),
    refused where not even `budget.MIN_DRAWS` do, and its draws end within its limit. `progress`
    (fraction, sentence), e.g. a gr.Progress (ZeroGPU forwards its calls), hears how it goes."""
    from dataclasses import replace

    from demo.session import budget, exactness

    k = validate.integer("k (the tokens after the first that are checked)", k, 1, K_MAX)
    estimate, said = budget.fit(budget.law(request.preset, request.drafter, request.gamma, k, n))
    prompts = _prompts(request, image_payload, uploads, progress)
    deadline = budget.Deadline()
    deadline.arm(budget.limit(estimate))  # from now, its models loaded, as a race's
    loaded = prompts.loaded
    drafter = loaded.drafter(request.drafter)
    prompt = prompts.checked(request.drafter, K_MAX + 2)
    sampling = replace(request.sampling, greedy=False)
    result = exactness.check(
        loaded,
        prompt,
        drafter,
        gamma=request.gamma,
        sampling=sampling,
        k=k,
        n=estimate.units,
        seed=request.sampling.seed,
        budget_s=None,
        ends=deadline.ends,
        progress=progress,
    )
    return result.to_dict() | {"shortened": said}
