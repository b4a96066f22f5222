"""Models: which presets exist, where their weights come from, and how they are loaded.

Owns the preset table (`presets`, importable without torch), hub access that never downloads
unless allowed (`hub`), per-architecture adapters for the target (`families`), device and memory
planning (`devices`), the ZeroGPU shim (`zerogpu`), loading itself (`loader`: `load`, `Loaded`),
preloading at start-up (`preloading`: `preload`, `check_served`) and what token ids mean
(`vocab`: stop ids, image placeholders, a drafter's vocabulary checked against the target's).

May import the engine (a loaded target and drafters are engine objects). Imports no Gradio, no
plotly, no page, no benchmark and no world training. Nothing loads at import.
"""
