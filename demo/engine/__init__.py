"""The decoding engine: one exact speculative loop that yields typed events.

Owns the event types (`events`), the acceptance rules (`sampling`), the drafters and their
per-run state (`drafters`), the speculative round and both generators (`speculative`), the metrics
computed from a trace (`metrics`), the compute-fair interleaving of lanes (`race`), incremental
detokenisation (`detokenize`), trace exports (`export`) and the transformers-version shim
(`compat`).

May import torch and transformers, and nothing else of demo: no Gradio, no plotly, no page, no
benchmark, no model loading, no world. Models arrive already loaded, from the caller.
"""
