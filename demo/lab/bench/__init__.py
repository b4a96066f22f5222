"""Measurement: the paper-style benchmark (`python -m demo.lab.bench`), its report, the page
benchmark (`python -m demo.lab.bench.page`), the memory soak (`python -m demo.lab.bench.soak`), the GPU
check (`python -m demo.lab.bench.gpu_check`) and the step-cost bench (`python -m
demo.lab.bench.step_costs`).

May import every layer below it (engine, models, session, world). It drives the page only as a
client over HTTP, or through the page's launch function; it never imports the page's handlers.
"""
