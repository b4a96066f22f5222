"""Speculative decoding for a multimodal target, shown token by token.

Layers, each a package that imports only the ones before it:

    engine/    the exact decoding loop and its typed events (no Gradio, no model loading)
    models/    presets, hub access, loading
    session/   one Request parsed by name, lanes, run() -> Trace, warm-up, replay (no Gradio);
               gamma_sweep (the γ sweep of a finished race), offers (what can run here,
               checked before any work), failures (what a failed request is told), validate
               (input checks), languages (a question's language and its drafter) and
               rejections (where drafts are rejected)
    page/      the Gradio app
    bench/     benchmarks, soak, GPU check
    world/     the embedded synthetic world and its training recipe
    deploy/    staging and pushing the Hugging Face Space (apart: no layer imports it)

tests/test_layers.py enforces the directions.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository (or the staged Space)
ASSETS = ROOT / "assets" / "world"  # the embedded models and example images
