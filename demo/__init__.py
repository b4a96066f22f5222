"""Speculative decoding for a multimodal target, shown token by token.

The app's layers import one way (tests/test_layers.py enforces the directions): engine/ (the exact
loop and its typed events), models/ (presets, loading), world/ (the embedded world's runtime data),
session/ (one Request, the Race, budget, analysis; no Gradio), serve/ (the front door) and page/
(the Gradio app). Beside them, never imported by the app: batch/ (the analysis on Ray Data), lab/
(benchmarks, training, experiments) and deploy/ (the Space).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository (or the staged Space)
ASSETS = ROOT / "assets" / "world"  # the embedded models and example images
