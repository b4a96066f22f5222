"""Traces -> exportable records: one JSON document per race, one CSV row per token.

Pure functions of `Trace`s (each describes its own run) and the request's settings, shared by the
app's downloads, its API endpoint and the benchmark. Numbers come from `demo.engine.metrics`; NaN (a
metric with nothing to count yet, e.g. alpha of an autoregressive run) becomes null, so the JSON is
strict. A race's lanes are named as the session names them: "speculative", "speculative-2" (a
second drafter's lane, when there is one) and "autoregressive"; every lane is exported.
"""

from __future__ import annotations

import csv
import io
import json
import math

from demo.engine import metrics
from demo.engine.events import Trace

CSV_COLUMNS = (
    "run",
    "index",
    "token_id",
    "text",
    "kind",
    "round",
    "p",
    "q",
    "accept_prob",
    "rejected_id",
    "rejected_text",
    "rejected_p",
    "rejected_q",
    "rejected_accept_prob",
    "t",
    "drafter",  # the lane's drafter (empty for the autoregressive lane)
    "image_attention",  # the target's share of attention on the image there (empty where not read)
)


def _strict(value):
    """Replace NaN and infinities by None, recursively, so the value is valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def comparison(spd: Trace, ar: Trace) -> dict:
    """Whether the two finished runs wrote the same tokens, where they first differ, and the first's
    speedups over the second: the wall clock's, the headline's projection, this machine's range."""
    a, b = spd.summary.token_ids, ar.summary.token_ids
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)  # lengths may differ
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    both_decoded = metrics.decode_tokens(spd) > 0 and metrics.decode_tokens(ar) > 0
    split = metrics.split(spd, ar) if both_decoded else None
    return {
        "identical": first is None,
        "first_difference": first,
        "speedup": metrics.speedup(spd, ar) if both_decoded else math.nan,  # the wall clock's
        "projected_speedup": metrics.scaled_speedup(spd),  # the headline's projection
        "measured_speedup": [split["low"], split["high"]] if split else None,  # this machine's range
    }


def engine_names(trace: Trace) -> dict:
    """A speculative lane's numbers under the names SGLang (`spec_*`, per request) and vLLM (its
    spec-decode counters) report them by, so they can be set beside theirs; docs/api.md defines
    each. A token tree's drafts are its walked path; `verified_nodes` counts every node verified."""
    rounds = trace.rounds
    verify_ct = len(rounds)
    proposed = metrics.drafted(trace)
    correct = metrics.accepted(trace)
    completion = len(trace.tokens)
    drafting = [r for r in rounds if r.drafted_ids]
    per_pos = [sum(r.n_accepted > i for r in drafting) for i in range(trace.gamma)]
    return {
        "spec_verify_ct": verify_ct,
        "spec_num_proposed_drafts": proposed,
        "spec_num_correct_drafts": correct,
        "spec_accept_rate": correct / proposed if proposed else math.nan,
        "spec_accept_length": completion / verify_ct if verify_ct else math.nan,
        "spec_accept_histogram": metrics.accept_length_histogram(trace),
        "num_drafts": len(drafting),
        "num_draft_tokens": proposed,
        "num_accepted_tokens": correct,
        "num_accepted_tokens_per_pos": per_pos,
        "acceptance_rate_per_pos": [n / len(drafting) if drafting else math.nan for n in per_pos],
        "mean_acceptance_length": 1 + correct / len(drafting) if drafting else math.nan,
        "verified_nodes": sum(metrics.verify_width(r) - 1 for r in rounds),
    }


def payload(
    settings: dict,
    traces: dict[str, Trace],
    gamma_sweep: list[dict] | None = None,
    strategies: list[dict] | None = None,
) -> dict:
    """The whole race: settings, and each run's event trace and metrics (a speculative run's
    `engine_names` too); once every run is done, "comparisons", each speculative lane against
    "autoregressive", and "comparison", the first lane's; `gamma_sweep` and `strategies` if given."""
    runs = {name: {"metrics": metrics.summary(trace), "trace": trace.to_dict()} for name, trace in traces.items()}
    for name, trace in traces.items():
        if trace.start is not None and trace.start.mode == "speculative":
            runs[name]["engine_names"] = engine_names(trace)
    out = {"settings": settings, "runs": runs}
    if all(t.done for t in traces.values()) and {"speculative", "autoregressive"} <= traces.keys():
        ar = traces["autoregressive"]
        out["comparison"] = comparison(traces["speculative"], ar)
        out["comparisons"] = {
            name: comparison(trace, ar) for name, trace in traces.items() if trace.start.mode == "speculative"
        }
    if gamma_sweep is not None:
        out["gamma_sweep"] = gamma_sweep
    if strategies is not None:
        out["strategies"] = strategies
    return _strict(out)


def to_json(record: dict) -> str:
    return json.dumps(record, indent=1, ensure_ascii=False, allow_nan=False)


def tokens_csv(traces: dict[str, Trace]) -> str:
    """One row per token of every run, in answer order."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for name, trace in traces.items():
        drafter = trace.start.drafter.name if trace.start and trace.start.drafter else None
        for tok in trace.tokens:
            row = {"run": name, **tok.to_dict(), "drafter": drafter, "image_attention": trace.image_share(tok.index)}
            writer.writerow(["" if row[c] is None else row[c] for c in CSV_COLUMNS])
    return buffer.getvalue()
