"""The Analysis tab's "Open a batch": a batch's Parquet files uploaded (or, on a local copy, its
folder named) and shown with the same charts, sentences and tables as a live analysis
(`opened.read`). A page handler only: off the API and MCP surface.
"""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr

from demo.models import zerogpu
from demo.page.analysis import opened
from demo.page.analysis.view import status_html

NOTE = (
    "Open the results of a batch run on your own machine or cluster (see the README): upload its "
    "tokens.parquet and examples.parquet (manifest.json and errors.parquet too, if you have them)"
)


def open_batch(folder: str, files: list | None, view: Callable) -> dict:
    """The tab's outputs for the batch in `folder` (a local copy only) or the uploaded `files`."""
    try:
        if files:
            batch = opened.read([getattr(f, "name", f) for f in files])
        elif folder and folder.strip() and not zerogpu.on_space():
            batch = opened.read(folder.strip())
        else:
            return view(None, status_html("Choose a batch's files first.", error=True), busy=False)
    except (OSError, ValueError, KeyError) as error:
        return view(None, status_html(f"That is not a batch this tab can read: {error}", error=True), busy=False)
    lanes = len(batch.runs)
    status = (
        f"Opened a batch ({batch.opened}): {len({r.example for r in batch.runs})} examples, "
        f"{lanes} run{'s' * (lanes != 1)} of {', '.join(batch.drafters)}, {batch.decoding}, γ = {batch.gamma}. "
        "These results were read from files, not run here."
    )
    return view(batch, status_html(status), busy=False)


def open_section(outputs: dict, names: tuple[str, ...], view: Callable) -> None:
    """Lay the section out in the current Blocks context; its results go to the tab's `outputs`."""
    local = not zerogpu.on_space()
    with gr.Accordion("Open a batch's results", open=False, elem_id="an-open"):
        gr.Markdown(NOTE + (", or name its folder on this machine." if local else "."), elem_classes="an-note")
        with gr.Row():
            folder = gr.Textbox(label="Batch folder", visible=local, elem_id="an-open-folder", scale=3)
            files = gr.File(
                label="Batch files", file_count="multiple", file_types=[".parquet", ".json"], elem_id="an-open-files"
            )
        go = gr.Button("Open batch", size="sm", elem_id="an-open-run")
    go.click(
        lambda f, up: [open_batch(f, up, view)[name] for name in names],
        [folder, files],
        [outputs[name] for name in names],
        api_visibility="private",
        show_progress="minimal",
    )
