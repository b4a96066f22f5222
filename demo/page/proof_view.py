"""The page's proof section (issue 56), built and wired in one place: after every race, where each
speculative lane's time went (chart and sentence) and which answer tokens needed the image; on
demand, "Check exactness": the sampling law checked live, also the /exactness endpoint.

    section()                      the components, in the current Blocks context
    wire(p, raced, last, ...)      after a race (its Run event succeeded): the time split, then the image
                                   ablation; the button and /exactness: the law check

The views are `demo.page.proof`'s; the work that needs the models is `demo.session.proof_runs`'s.
"""

from __future__ import annotations

import html
from types import SimpleNamespace

import gradio as gr

from demo import session
from demo.engine.events import Trace
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
    "needed the image. <b>Check exactness</b> draws the first tokens many times with the lane, with the target "
    "alone and with a broken rule that accepts every draft, and tests each against the target's exact law.</p>"
)


def section() -> SimpleNamespace:
    p = SimpleNamespace()
    with gr.Accordion("Proof: where the time went, the sampling law, the image", open=True, elem_id="proof"):
        gr.HTML(INTRO)
        p.time_note = gr.HTML(elem_id="time-note")
        p.time_chart = gr.Plot(show_label=False, elem_id="time-split-chart")
        p.time_chart2 = gr.Plot(show_label=False, visible=False, elem_id="time-split-chart-2")
        p.dependence = gr.HTML(elem_id="image-dependence")
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


def _traces(timeline) -> dict[str, Trace]:
    traces: dict[str, Trace] = {}
    for lane, event in timeline:
        traces.setdefault(lane, Trace()).add(event)
    return traces


def on_race(last, image, question, preset, drafter, gamma, greedy, temperature, top_p, seed, max_new):
    """The race just ended: first each lane's time split (no model), then the ablation."""
    if not last:
        yield [gr.skip()] * 4
        return
    _, timeline = last
    traces = _traces(timeline)
    ar = traces.get("autoregressive")
    spds = [t for t in traces.values() if t.start is not None and t.start.mode == "speculative" and t.done]
    if ar is None or not spds:
        yield [gr.skip()] * 4
        return
    splits = [proof.time_split(spd, ar) for spd in spds]
    note = "".join(f"<p class='time-sentence'>{html.escape(proof.time_sentence(s))}</p>" for s in splits)
    second = proof.time_figure(splits[1]) if len(splits) > 1 else None
    yield note, proof.time_figure(splits[0]), gr.update(value=second, visible=second is not None), gr.skip()
    try:
        request = _request(question, preset, drafter, gamma, greedy, temperature, top_p, seed, max_new)
        answers = {lane: list(t.summary.token_ids) for lane, t in traces.items() if t.done}
        read = proof_runs.ablate(request, image, runs_uploads(), answers)
        lane = "speculative" if "speculative" in read else next(iter(read))
        yield gr.skip(), gr.skip(), gr.skip(), proof.dependence_html(traces[lane], read[lane])
    except Exception as error:  # the race stands; only this reading is lost
        yield gr.skip(), gr.skip(), gr.skip(), f"<p class='ablation-none'>{html.escape(failures.message(error))}</p>"


def _request(*values) -> session.Request:
    """The request of the race form's values, given in the request's field order (`form.FIELDS`,
    parse's: question, preset, drafter, gamma, greedy, temperature, top_p, seed, max_new_tokens)."""
    return session.parse(**dict(zip(form.FIELDS, values)))


def runs_uploads():
    from demo.page.handlers import uploads

    return uploads()


def exactness(image, question, preset, drafter, gamma, temperature, top_p, seed, k):
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
        temperature: sampling temperature, above 0 and at most 5 (the check samples; greedy has one outcome).
        top_p: nucleus sampling mass in (0, 1].
        seed: the seed of the draws.
        k: how many tokens after the first form the checked law, 1 to 3.
    Returns:
        A sentence with each way's verdict, a chart of the law against the draws, and the numbers as JSON
        (total-variation distance and p-value of each way, draws made).
    """
    try:
        request = _request(question, preset, drafter, gamma, False, temperature, top_p, seed, K_MAX + 2)
        result = proof_runs.check_law(request, image, runs_uploads(), k=k)
    except Exception as error:
        message = failures.message(error)
        raise runs.page_error(message) from None
    return proof.law_summary(result), proof.law_figure(result), result


def wire(p: SimpleNamespace, raced, last, image, fields: list) -> None:
    """`raced`: the Run button's event, which sets `last` (the race's record) as it ends; `fields`:
    the race's question, preset, drafter, gamma, decoding, temperature, top_p, seed, max_new
    components, in that order."""
    outputs = [p.time_note, p.time_chart, p.time_chart2, p.dependence]
    raced.success(
        on_race, [last, image, *fields], outputs, api_visibility="private", show_progress="hidden", preprocess=False
    )
    question, preset, drafter, gamma, _, temperature, top_p, seed, _ = fields
    p.paradox.click(paradox_example, None, [image, question, preset, drafter], api_visibility="private", queue=False)
    p.check.click(
        exactness,  # the MCP tool "exactness", described by its docstring
        [image, question, preset, drafter, gamma, temperature, top_p, seed, p.k],
        [p.law_note, p.law_chart, p.law_json],
        api_name="exactness",
        concurrency_limit=1,
        concurrency_id="race",
        preprocess=False,
    )
