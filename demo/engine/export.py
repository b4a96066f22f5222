"""Traces -> exportable records: one JSON document per race, one CSV row per token.

Pure functions of `Trace`s (each describes its own run) and the request's settings, shared by the app's downloads, its API
endpoint and the benchmark. Numbers come from `demo.engine.metrics`; NaN (a metric with nothing to
count yet, e.g. alpha of an autoregressive run) becomes null, so the JSON is strict.

    payload(settings, traces) -> dict            the whole race: settings, both traces, metrics
    comparison(spd, ar) -> dict                  identical outputs? first difference, speedup
    to_json(payload) -> str
    tokens_csv(traces) -> str                    run, index, text, kind, round, p, q, ... t
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
    """Whether the two finished runs wrote the same tokens, where they first differ, and the
    wall-clock decoding speedup of the first over the second."""
    a, b = spd.summary.token_ids, ar.summary.token_ids
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)  # lengths may differ
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    both_decoded = metrics.decode_tokens(spd) > 0 and metrics.decode_tokens(ar) > 0
    return {
        "identical": first is None,
        "first_difference": first,
        "speedup": metrics.speedup(spd, ar) if both_decoded else math.nan,
    }


def payload(settings: dict, traces: dict[str, Trace], gamma_sweep: list[dict] | None = None) -> dict:
    """The whole race: settings, and for each run its full event trace and its metrics; with
    `gamma_sweep` (`demo.sweeps.gamma_sweep`'s records), that too."""
    runs = {name: {"metrics": metrics.summary(trace), "trace": trace.to_dict()} for name, trace in traces.items()}
    out = {"settings": settings, "runs": runs}
    if all(t.done for t in traces.values()) and {"speculative", "autoregressive"} <= traces.keys():
        out["comparison"] = comparison(traces["speculative"], traces["autoregressive"])
    if gamma_sweep is not None:
        out["gamma_sweep"] = gamma_sweep
    return _strict(out)


def to_json(record: dict) -> str:
    return json.dumps(record, indent=1, ensure_ascii=False, allow_nan=False)


def tokens_csv(traces: dict[str, Trace]) -> str:
    """One row per token of every run, in answer order."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for name, trace in traces.items():
        for tok in trace.tokens:
            row = {"run": name, **tok.to_dict()}
            writer.writerow(["" if row[c] is None else row[c] for c in CSV_COLUMNS])
    return buffer.getvalue()
