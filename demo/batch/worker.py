"""The actor Ray Data runs on each worker: the preset's models loaded once, then each example decoded
through the session layer exactly as the Analysis tab decodes it; a failed example is one error
row with its sentence."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa

from demo.batch import columns, inputs

TABLES = ("tokens", "examples", "errors")


def ipc(rows: list[dict]) -> bytes:
    """Rows as one Arrow IPC stream (empty bytes for no rows)."""
    if not rows:
        return b""
    table = pa.Table.from_pylist(rows)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def rows(data: bytes) -> pa.Table | None:
    return pa.ipc.open_stream(data).read_all() if data else None


class Worker:
    """One worker's models and settings; callable on a batch of input rows (a pyarrow table)."""

    def __init__(self, preset: str, drafters: list[str], settings: dict, world: dict | None = None):
        from demo.models import loader
        from demo.session import parse

        parse(question="x", preset=preset, drafter=drafters[0], **settings)  # bad settings: said before any work
        self.preset, self.drafters, self.settings = preset, list(drafters), dict(settings)
        self.loaded = loader.load(preset)  # once per worker
        self.world = inputs.world_items(world) if world else None  # the scenes, to score answers
        self.pid = os.getpid()

    def __call__(self, table: pa.Table) -> pa.Table:
        out = {name: [] for name in ("example", "pid", *TABLES)}
        for row in table.to_pylist():
            made = decode(self, row)
            out["example"].append(row["example"])
            out["pid"].append(self.pid)
            for name, part in zip(TABLES, made):
                out[name].append(ipc(part))
        return pa.table(out)


def _image(row: dict):
    from demo.session import validate

    path = row.get("image_path")
    if row.get("image") is None:
        if not path or not Path(path).is_file():
            raise validate.InvalidInput(f"The image {Path(path).name if path else ''} is missing.".replace("  ", " "))
        return validate.open_image(path)[0]
    with tempfile.NamedTemporaryFile(suffix=".img") as file:  # checked from the file, as an upload is
        file.write(row["image"])
        file.flush()
        return validate.open_image(file.name)[0]


def decode(worker: Worker, row: dict) -> tuple[list, list, list]:
    """One example's rows: (tokens, examples, errors), errors holding one row where it failed."""
    from demo.engine.sampling import Sampling
    from demo.session import analysis, failures, parse
    from demo.session.race_events import Decoded

    s = worker.settings
    try:
        image = _image(row)
        for d in worker.drafters:  # the question and settings, as /trace parses them
            request = parse(question=row["question"], preset=worker.preset, drafter=d, **s)
        item = SimpleNamespace(
            image=image, question=request.question, answer=row.get("reference"), task=row["task"],
            language=row["language"], scene=None,
        )  # fmt: skip
        if worker.world is not None:  # score against the scene, as the tab does
            item.scene = worker.world[row["example"]].scene
        # example i of the batch is seeded seed + i, as decode_examples seeds its i-th item
        sampling = None if s["greedy"] else Sampling(False, s["temperature"], 0, s["top_p"], s["seed"] + row["example"])
        tokens, examples = [], []
        started = time.perf_counter()
        for step in analysis.decode_examples(
            worker.preset, worker.drafters, [item], s["gamma"], s["max_new_tokens"], sampling
        ):
            if isinstance(step, Decoded):
                seconds = time.perf_counter() - started
                tokens += columns.token_rows(row, step, worker.loaded.target.stop_ids)
                examples.append(columns.example_row(row, step, seconds, sampling.seed if sampling else None))
                started = time.perf_counter()
        return tokens, examples, []
    except Exception as error:  # this example only: the rest go on
        return [], [], [columns.error_row(row, failures.message(error))]
