"""A batch's files read back as the Analysis tab's `Batch` (`read(paths)`: its folder, or its Parquet
files uploaded), so that the tab's charts, sentences and tables are the same functions of the same
counts as a live analysis's. Runs carry no trace: the run view shows the answer and its rejections."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from demo.page.analysis.view import Batch, Run
from demo.session.rejections import Observation

NEEDED = ("tokens.parquet", "examples.parquet")


def _files(paths) -> dict[str, Path]:
    """name -> path, from a folder or from files (an upload's temporary names end in the real ones)."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, str | Path) else paths or [])]
    found = {}
    for p in paths:
        for f in sorted(p.iterdir()) if p.is_dir() else [p]:
            for name in (*NEEDED, "errors.parquet", "manifest.json"):
                if f.name.endswith(name):
                    found[name] = f
    missing = [n for n in NEEDED if n not in found]
    if missing:
        raise ValueError(f"A batch needs {' and '.join(NEEDED)}; {' and '.join(missing)} not found.")
    return found


def _none(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _observation(row: dict) -> Observation:
    accepted = row["kind"] == "accepted"
    return Observation(
        example=int(row["example"]),
        index=int(row["position"]),
        rel=float(row["rel"]),
        token=row["token"],
        word=row["word"] or "",
        category=row["category"],
        accepted=accepted,
        draft=row["token"] if accepted else row["rejected"],
        draft_word=row["draft_word"],
        image_attention=_none(row["image_attention"]),
        image_dependent=_none(row["image_dependent"]),
    )


def read(paths) -> Batch:
    """The batch in a folder (or its uploaded files) as a `Batch` of runs, in example order."""
    files = _files(paths)
    examples = pd.read_parquet(files["examples.parquet"])
    tokens = pd.read_parquet(files["tokens.parquet"])
    manifest = json.loads(files["manifest.json"].read_text()) if "manifest.json" in files else {}
    settings = manifest.get("settings", {})
    drafters = manifest.get("drafters") or list(dict.fromkeys(examples["drafter"]))
    checked = tokens[tokens["checked"]].astype(object).where(tokens[tokens["checked"]].notna(), None)
    obs = {
        key: [_observation(r) for r in group.to_dict("records")]
        for key, group in checked.groupby(["example", "drafter"])
    }
    world = (manifest.get("source") or {}).get("world") or {}
    batch = Batch(
        preset=manifest.get("preset", "?"),
        task=world.get("task", "files"),
        drafters=drafters,
        gamma=int(settings.get("gamma", examples["gamma"].iloc[0] if len(examples) else 0)),
        n=examples["example"].nunique(),
        seed=world.get("seed", 0),
        max_new_tokens=int(settings.get("max_new_tokens", 0)),
        language=world["languages"][0] if len(world.get("languages", [])) == 1 else "all",
        decoding="greedy" if settings.get("greedy", True) else "sampled",
        opened=", ".join(sorted(p.name for p in files.values())),
    )
    rows = examples.sort_values(
        ["example", "drafter"], key=lambda c: c.map(drafters.index) if c.name == "drafter" else c
    )
    for number, r in enumerate(rows.to_dict("records"), 1):
        item = SimpleNamespace(task=r["task"], question=r["question"], answer=r["reference"] or "", image=None)
        numbers = {k: r[k] for k in ("decode_tokens", "rounds", "drafted", "accepted")} | {"answer": r["answer"]}
        correct = None if r["correct"] is None or pd.isna(r["correct"]) else bool(r["correct"])
        found = obs.get((r["example"], r["drafter"]), [])
        batch.runs.append(
            Run(number, int(r["example"]), item, r["drafter"], None, found, correct, r["language"], numbers)
        )
    batch.seconds = sum(examples["seconds"])
    return batch
