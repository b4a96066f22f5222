"""A decoded example as rows of the batch's three tables (tokens, examples, errors), as plain dicts;
docs/batch.md lists their columns."""

from __future__ import annotations

import math
import os

import torch

from demo.engine import export, metrics
from demo.session import rejections

META = ("example", "source", "language", "task")


def _key(meta: dict) -> dict:
    return {name: meta[name] for name in META}


def token_rows(meta: dict, decoded, stop_ids: frozenset[int]) -> list[dict]:
    """Every answer token of one lane: where it came from (kind), p and q, the draft it replaced,
    its word and the word's category; at drafted-and-checked positions, the observation's fields."""
    trace, n = decoded.trace, len(decoded.trace.tokens)
    words = rejections.token_categories(trace, stop_ids, meta["language"])
    observed = {o.index: o for o in decoded.observations}
    rows = []
    for tok, (word, cat) in zip(trace.tokens, words):
        o = observed.get(tok.index)
        rej = tok.rejection
        rows.append(
            _key(meta)
            | {
                "drafter": decoded.drafter,
                "round": tok.round,
                "position": tok.index,
                "rel": tok.index / n,
                "token": tok.text,
                "token_id": tok.token_id,
                "kind": tok.kind,
                "p": tok.p,
                "q": tok.q,
                "accept_prob": tok.accept_prob,
                "rejected": rej.text if rej else None,
                "rejected_id": rej.id if rej else None,
                "rejected_p": rej.p if rej else None,
                "rejected_q": rej.q if rej else None,
                "word": o.word if o else word,
                "category": o.category if o else cat,
                "checked": o is not None,  # a drafted position the target checked: an observation
                "draft_word": o.draft_word if o else None,
                "image_attention": trace.image_share(tok.index),
                "image_dependent": o.image_dependent if o else None,
            }
        )
    return rows


def _nan(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def example_row(meta: dict, decoded, seconds: float, seed: int | None) -> dict:
    """One lane's numbers: the project's (τ, α, MBSU), and SGLang's and vLLM's names for the same
    counts (docs/batch.md)."""
    trace = decoded.trace
    names = export.engine_names(trace)
    share = rejections.grounded_share(decoded.observations)
    drafting = [r for r in trace.rounds if r.drafted_ids]
    histogram = names["spec_accept_histogram"]  # vLLM's acceptance_histogram counts the same rounds
    return _key(meta) | {
        "drafter": decoded.drafter,
        "seed": seed,
        "question": meta["question"],
        "reference": meta.get("reference"),
        "answer": trace.summary.text,
        "correct": decoded.correct,
        "stop": trace.summary.stop,
        "gamma": trace.gamma,
        "tau": _nan(metrics.tau(trace)),
        "alpha": _nan(metrics.alpha(trace)),
        "mbsu": _nan(metrics.mbsu(trace)),
        "tokens": len(trace.tokens),
        "decode_tokens": metrics.decode_tokens(trace),
        "rounds": len(trace.rounds),
        "drafted": metrics.drafted(trace),
        "accepted": metrics.accepted(trace),
        "checked": share["drafted"],
        "rejected": share["rejected"],
        "grounded_drafted": share["grounded_drafted"],
        "grounded_rejected": share["grounded_rejected"],
        "accept_length_histogram": histogram,
        "acceptance_by_position": [_nan(x) for x in metrics.acceptance_by_position(trace)],
        # SGLang's per-request meta_info
        "spec_verify_ct": names["spec_verify_ct"],
        "spec_accept_length": _nan(names["spec_accept_length"]),
        "spec_accept_rate": _nan(names["spec_accept_rate"]),
        "spec_accept_token_num": names["spec_num_correct_drafts"],
        "spec_draft_token_num": names["spec_num_proposed_drafts"],
        "spec_accept_histogram": names["spec_accept_histogram"],
        # vLLM's RequestSpecDecodeMetrics ("detailed")
        "num_spec_steps": names["num_drafts"],
        "num_draft_tokens": names["num_draft_tokens"],
        "num_accepted_draft_tokens": names["num_accepted_tokens"],
        "draft_acceptance_rate": _nan(names["spec_accept_rate"]),
        "mean_acceptance_length": _nan(names["mean_acceptance_length"]),
        "acceptance_histogram": histogram,
        "per_step_accepted": [r.n_accepted for r in drafting],
        "per_step_drafted": [len(r.drafted_ids) for r in drafting],
        "acceptance_rate_per_pos": [_nan(x) for x in names["acceptance_rate_per_pos"]],
        "seconds": seconds,
        "worker_pid": os.getpid(),
        "torch_threads": torch.get_num_threads(),  # p and q are bit-equal to a run with as many threads
    }


def error_row(meta: dict, reason: str) -> dict:
    return _key(meta) | {"question": meta.get("question"), "reason": reason, "worker_pid": os.getpid()}
