"""The embedded multimodal world: synthetic scenes, their tasks, and the models trained on them.

Contract: importing this package is cheap (no torch, no model loading). `ASSETS` is where the
trained models live: ASSETS / "target" (LLaVA), "drafter-text" (Llama, never sees the image),
"drafter-image" (small LLaVA), "examples" (held-out gallery). Submodules:
`scenes` (what is drawn), `tasks` (questions and reference answers), `scoring` (what counts as
correct), `text` (tokenizer, chat template, processor), `recipe` (a config per training stage),
`train` and `evaluate` (the commands). `experiments` holds measurements beside the recipe that
the recipe never imports.
"""

from demo import ASSETS  # noqa: F401  (re-exported)
