"""A development page for the Analysis tab: the tab beside stand-ins for the Race tab's inputs,
whose Run button only says what it got. Tests launch it in-process; a developer can too:

    python tests/analysis_page.py
"""

import sys
from pathlib import Path

import gradio as gr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the repository's demo/

from demo.models import presets  # noqa: E402
from demo.page import layout  # noqa: E402
from demo.page.analysis.tab import RaceControls, analysis_tab  # noqa: E402


def build_standalone(default_preset: str = presets.DEFAULT_PRESET) -> gr.Blocks:
    """The tab beside stand-ins for the Race tab's inputs (its Run button only says what it got)."""
    names = [s.name for s in presets.PRESETS[default_preset].drafters]
    with gr.Blocks(title="Speculative decoding: error analysis") as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("Race", id="race"):
                with gr.Row():
                    image = gr.Image(type="pil", label="Image", height=240, elem_id="image")
                    with gr.Column():
                        question = gr.Textbox(label="Question", lines=2, elem_id="question")
                        reference = gr.HTML(elem_id="reference")
                        preset = gr.Dropdown(
                            list(presets.PRESETS), value=default_preset, label="Model preset", elem_id="preset"
                        )
                        drafter = gr.Dropdown(names, value=names[0], label="Drafter", elem_id="drafter")
                        gamma = gr.Slider(1, 10, value=4, step=1, label="γ", elem_id="gamma")
                        decoding = gr.Radio(layout.DECODING, value=False, label="Decoding", elem_id="decoding")
                        max_new = gr.Slider(1, 512, value=128, step=1, label="Max new tokens", elem_id="max-new")
                        adaptive = gr.Checkbox(True, label="Adaptive draft length", elem_id="adaptive")
                        run = gr.Button("Run the race", variant="primary", elem_id="run")
                said = gr.Markdown(elem_id="raced")
                run.click(
                    lambda im, q, p, d, g, dec, m, a: (
                        f"Raced: {q!r} with {p}/{d}, γ = {g}, {'greedy' if dec else 'sampling'}, {m} tokens, "
                        f"adaptive {'on' if a else 'off'}, image {'given' if im is not None else 'missing'}."
                    ),
                    [image, question, preset, drafter, gamma, decoding, max_new, adaptive],
                    said,
                    api_name="race",
                )
            with gr.Tab("Analysis", id="analysis"):
                analysis_tab(
                    RaceControls(
                        tabs=tabs,
                        race_tab="race",
                        image=image,
                        question=question,
                        preset=preset,
                        drafter=drafter,
                        gamma=gamma,
                        decoding=decoding,
                        max_new=max_new,
                        run=run,
                        reference=reference,
                        adaptive=adaptive,
                    )
                )
    return demo


if __name__ == "__main__":
    from demo.page.text import CSS

    build_standalone().launch(css=CSS)
