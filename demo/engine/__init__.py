"""The decoding engine: one exact speculative loop that yields typed events.

Its 26 modules (tests/test_layers.py checks that this list names every one):

    events        the event types, the contract with everything else
    speculative   the speculative round and both generators
    verification  the target's decision on one round's drafts
    sampling      the acceptance rules (greedy and the rejection-sampling law)
    decoding      the target as the engine drives it, a request's inputs, a run's compute clock
    drafters      the drafter models and their per-run state
    trees         token-tree drafting and its one-forward verify
    lookup        prompt lookup: drafts copied from the prompt and answer
    layerskip     the target drafting for itself with layers skipped
    feature       drafters that read the target's hidden state (a speculator, Medusa heads)
    heads         the networks those drafters run, and their checkpoints
    feature_steps  the speculator's draft step in NumPy on a CPU
    staged        staged drafting: a drafter drafted by lookup
    lean          lean drafting: a drafter's step at the cost of its arithmetic
    lean_lm       the lean language model over a static KV cache
    lean_steps    the lean drafter's one-token step on each device
    lean_target   the lean target's decode forwards
    target_lm     the lean target's forward and its CUDA graphs
    race          the compute-fair interleaving of lanes
    sweep         a greedy race replayed at other draft lengths
    metrics       the metrics computed from a trace
    scale         a race's speedup at the paper's fixed step-cost ratios
    grounding     the image attention of an answer (its result type)
    detokenize    incremental detokenisation
    export        trace exports (JSON, CSV)
    compat        the transformers-version shim

May import torch and transformers, and nothing else of demo: no Gradio, no plotly, no page, no
benchmark, no model loading, no world. Models arrive already loaded, from the caller.
"""
