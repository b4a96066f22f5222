"""Measurement: the paper-style benchmark (`python -m demo.lab.bench`), its report, the page
benchmark (`python -m demo.lab.bench.page`), the memory soak (`python -m demo.lab.bench.soak`), the GPU
check (`python -m demo.lab.bench.gpu_check`) and what each draft of a round costs
(`python -m demo.lab.bench.draft_positions`).

May import every layer below it (engine, models, session, world). It drives the page only as a
client over HTTP, or through the page's launch function; it never imports the page's handlers.
"""
