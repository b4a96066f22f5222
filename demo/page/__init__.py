"""The page: the Gradio app, its layout, handlers, text and views.

Owns what a visitor sees: the Race tab and the Analysis tab, their handlers, the token and block
HTML (`render`), the charts (`charts`, `analysis_charts`) and the launch.

Reads runs only through the session layer (`demo.session`) and the traces it returns: the page
touches no caches or logits. May import the engine's event types and metrics, the models' preset
table and the world's vocabulary; never the benchmark (`demo.lab.bench`) nor world training.
"""
