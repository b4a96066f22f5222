"""The page's proof section: after every race, where each speculative lane's time went and which
answer tokens needed the image, read off the race's own record; on demand, "Check exactness" (and
/exactness, which takes the request's fields by name), the sampling law checked live."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import gradio as gr

from demo import session
from demo.page import proof, runs
from demo.session import failures, form, proof_runs
from demo.session.proof_runs import K_MAX

# The classroom example of "acceptance is not speedup", picked from the strategy table's measurements
# on this 2-core CPU (2026-12-05, beside other jobs; `demo.page.proof.time_split` of greedy races of
# `paradox_example` at γ 4, 96 tokens, made with tests/races.py): layer skip accepted 76% of its
# drafts (τ 3.96) and ran ×0.96, its drafting costing 2.8 single target steps a round (its drafter is
# 4 of the target's 6 layers); the text-only drafter accepted 70% (τ 3.80) and ran ×1.93. On another
# description (held-out 55, then the gallery's first), layer skip again ran ×1.09-1.36 at 59%.
PARADOX_DRAFTER = "layer-skip"
PARADOX = (
    "<p class='paradox-note'><b>High acceptance, little speedup.</b> Layer skip drafts with 4 of the target's "
    "6 layers. On this example it accepted 76% of its drafts (τ 3.96) and ran ×0.96 on this CPU, while the "
    "text-only drafter, accepting 70%, ran ×1.93. Load it, press Run, and read the sentence above the time "
    "chart: drafting costs almost three target steps a round, which τ cannot buy back.</p>"
)

INTRO = (
    "<p class='proof-intro'>After each race: where each speculative lane's time went, and which answer tokens "
    "needed the image. <b>Check exactness</b> takes the race shown above (its question, image, drafter and "
    "settings) and draws its first tokens many times with the lane, with the target alone and with a broken rule "
    "that accepts every draft, testing each against the target's exact law.</p>"
)


def section() -> SimpleNamespace:
    p = SimpleNamespace()
    with gr.Accordion("Proof: where the time went, the sampling law, the image", open=True, elem_id="proof"):
        gr.HTML(INTRO)
        p.time_note = gr.HTML(elem_id="time-note", label="time split note")
        p.time_chart = gr.Plot(show_label=False, elem_id="time-split-chart", label="time split chart")
        p.time_chart2 = gr.Plot(
            show_label=False, visible=False, elem_id="time-split-chart-2", label="second time split chart"
        )
        p.dependence = gr.HTML(elem_id="image-dependence", label="image dependence")
        with gr.Row():
            p.k = gr.Radio(list(range(1, K_MAX + 1)), value=2, label="Tokens checked (k)", elem_id="law-k", scale=2)
            p.check = gr.Button("Check exactness", elem_id="check-exactness", scale=1, min_width=140)
        p.law_note = gr.HTML(elem_id="law-note", label="law check")
        p.law_chart = gr.Plot(show_label=False, elem_id="law-chart", label="law chart")
        p.law_json = gr.JSON(visible=False, label="law")
        with gr.Row():
            p.paradox = gr.Button("Classroom: high acceptance, no speedup", elem_id="paradox", scale=1, min_width=140)
            gr.HTML(PARADOX)
    return p


def paradox_example():
    """The classroom example: its image and question, and layer skip as the drafter (embedded preset)."""
    from demo.world.tasks import heldout_examples

    example = heldout_examples("description", 1, seed=2)[0]
    return example.image, example.question, "embedded", PARADOX_DRAFTER


def runs_uploads():
    from demo.page.handlers import uploads

    return uploads()


def _check(request: session.Request, image, k, progress=None) -> tuple:
    try:  # k checked there, with a sentence; `progress` hears the draws done and the time left
        result = proof_runs.check_law(request, image, runs_uploads(), k=k, progress=progress)
    except Exception as error:
        raise runs.page_error(failures.message(error)) from None
    return proof.law_summary(result), proof.law_figure(result), result


def on_check(last, k, progress=gr.Progress()):  # noqa: B008 (Gradio's way: a default it fills in)
    """The law check of the race shown above (its request and image, as raced: `last`)."""
    if not last or len(last) < 4:
        raise runs.page_error("Run a race first: the check draws from the race shown above.")
    _, _, request, image = last[:4]
    return _check(request, image, k, progress)


def exactness(image, *sent):
    """Check that speculative sampling is lossless on one image and question: draw the k tokens after
    the first many times three ways (the target alone, the speculative lane, and a deliberately broken
    rule that accepts every draft) and test each against the target's exact law of those tokens. The
    lane and the target should pass and the broken rule fail; too few draws are said to be too few.

    Args:
        image: the picture the question is about (a URL or a file).
        question: what to ask about the image.
        preset: the model pair; "embedded" is the small built-in pair.
        drafter: the drafter whose acceptance rule is checked, e.g. "text-only".
        gamma: tokens the drafter proposes per round, 1 to 10.
        greedy: ignored: the check always samples (greedy has one outcome).
        temperature: sampling temperature, above 0 and at most 5.
        top_p: nucleus sampling mass in (0, 1].
        seed: the seed of the draws.
        max_new_tokens: ignored: the check reads the first k + 1 tokens.
        min_confidence: adaptive drafting; stop a round's drafting below this probability (0 = off).
        second_drafter: ignored: the check is of the first drafter's lane.
        k: how many tokens after the first form the checked law, 1 to 3.
    Returns:
        A sentence with each way's verdict, a chart of the law against the draws, and the numbers as JSON
        (total-variation distance and p-value of each way, draws made).
    """
    values = EXACTNESS.bind(image, *sent).arguments
    try:
        request = session.parse(**form.fields(values) | {"greedy": False, "max_new_tokens": K_MAX + 2})
    except Exception as error:
        raise runs.page_error(failures.message(error)) from None
    return _check(request, image, values.get("k", 2))


_K = inspect.Parameter("k", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=2)
EXACTNESS = form.signature().replace(parameters=[*form.signature().parameters.values(), _K])
exactness.__signature__ = EXACTNESS  # what Gradio and MCP read /exactness's parameters from


def wire(p: SimpleNamespace, last, api_inputs: list) -> None:
    """The button checks the race in `last` (its record: facts, timeline, request, image);
    /exactness takes `api_inputs` (the image, the request's fields, as /trace's) and the k radio."""
    p.paradox.click(paradox_example, None, api_inputs[:4], api_visibility="private", queue=False)  # image .. drafter
    once = {"concurrency_limit": 1, "concurrency_id": "race", "preprocess": False}
    outputs = [p.law_note, p.law_chart, p.law_json]
    # its progress (draws done, time left at the measured rate) on the chart alone: Gradio's own
    # timer, an average of earlier checks, had read "171.0/17.1 s"
    p.check.click(on_check, [last, p.k], outputs, api_visibility="private", show_progress_on=p.law_chart, **once)
    gr.Button(visible=False).click(  # the MCP tool "exactness", described by its docstring
        exactness, [*api_inputs, p.k], outputs, api_name="exactness", **once
    )
