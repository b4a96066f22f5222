"""A batch on Ray Data: Ray started or joined, the examples mapped through a pool of `Worker` actors,
each finished part committed to --out as it comes (a killed run resumes; no example is written
twice), then the four files and the manifest."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import time
import uuid
from importlib import metadata
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from demo.batch import worker as batch_worker
from demo.batch.worker import TABLES

AGENT_WAIT_MS = "120000"  # a busy machine's node agent registers late: Ray's default wait is too short
FILES = {name: f"{name}.parquet" for name in TABLES}
SORT = {"tokens": ("example", "drafter", "position"), "examples": ("example", "drafter"), "errors": ("example",)}
VERSIONS = ("ray", "torch", "transformers", "datasets", "pyarrow", "gradio", "plotly")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def committed(out: Path) -> dict[int, int]:
    """example -> the worker pid that wrote it, over every whole part in out/parts."""
    held = {}
    for part in sorted((out / "parts").glob("[0-9a-f]*")):
        for name in ("examples", "errors"):
            path = part / FILES[name]
            if path.exists():
                t = pq.read_table(path, columns=["example", "worker_pid"])
                held.update(zip(t["example"].to_pylist(), t["worker_pid"].to_pylist()))
    return held


def _commit(out: Path, tables: dict[str, list[pa.Table]]) -> None:
    tmp = out / "parts" / f".tmp-{uuid.uuid4().hex}"
    tmp.mkdir(parents=True)
    for name, parts in tables.items():
        if parts:
            pq.write_table(pa.concat_tables(parts, promote_options="permissive"), tmp / FILES[name])
    os.rename(tmp, out / "parts" / f"{time.time_ns():x}-{uuid.uuid4().hex[:6]}")  # whole, or not there


def cpus_per_worker(cpus: float, workers: int) -> float:
    """A worker's CPUs: at most one, and half a CPU left for the read tasks (whole-CPU actors filling
    every CPU starve the read task forever)."""
    return round(max(0.1, min(1.0, (cpus - 0.5) / workers)), 2)


def _start_ray(address: str | None, workers: int) -> bool:
    """Join `address` (or RAY_ADDRESS), or start a local Ray sized to the machine; True if started
    here (and so stopped at the end)."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_agent_register_timeout_ms", AGENT_WAIT_MS)
    address = address or os.environ.get("RAY_ADDRESS")
    if address:  # the workers import this project as the driver does: the same path on every node
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    return True


def _versions() -> dict:
    found = {"python": platform.python_version()}
    for name in VERSIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def consolidate(out: Path) -> dict[str, int]:
    """The parts joined into tokens.parquet, examples.parquet, errors.parquet (sorted); rows each."""
    counts = {}
    for name in TABLES:
        paths = [p / FILES[name] for p in sorted((out / "parts").glob("[0-9a-f]*"))]
        parts = [pq.read_table(path) for path in paths if path.exists()]
        table = pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({"example": []})
        if parts:
            table = table.sort_by([(c, "ascending") for c in SORT[name]])
        pq.write_table(table, out / f".{FILES[name]}")
        os.replace(out / f".{FILES[name]}", out / FILES[name])
        counts[name] = table.num_rows
    return counts


def _check_same(out: Path, asked: dict) -> None:
    path = out / "parts" / "settings.json"
    if path.exists():
        held = json.loads(path.read_text())
        if held != asked:
            raise SystemExit(f"{out} holds a batch with other settings ({held}); use another --out.")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asked, indent=1))


def run(
    table: pa.Table,
    out: str | Path,
    preset: str,
    drafters: list[str],
    settings: dict,
    *,
    source: dict,
    world: dict | None = None,
    workers: int = 1,
    address: str | None = None,
    gpus_per_worker: float = 0.0,
    block: int = 1,
    on_part=None,
    progress: bool = True,
) -> dict:
    """Map `table`'s examples not yet in `out` through `workers` actors; write the results."""
    out = Path(out)
    asked = {"preset": preset, "drafters": list(drafters), "settings": settings, "source": source}
    _check_same(out, asked)
    for tmp in (out / "parts").glob(".tmp-*"):  # a part a killed run did not finish
        shutil.rmtree(tmp)
    held = committed(out)
    resumed = len(held)  # examples an earlier run wrote
    todo = table.filter(pc.invert(pc.is_in(table["example"], pa.array(list(held), pa.int64()))))
    started, resources = _now(), {}
    if todo.num_rows:
        resources = _map(todo, out, held, preset, drafters, settings, world, workers, address, gpus_per_worker,
                         block, on_part, progress, total=table.num_rows)  # fmt: skip
    counts = consolidate(out)
    manifest = _manifest(out, asked, world, workers, gpus_per_worker, resources, started, counts, resumed)
    from demo.batch import report

    report.write(out)
    return manifest


def _map(todo, out, held, preset, drafters, settings, world, workers, address, gpus, block, on_part, progress, total):
    import ray
    from tqdm import tqdm

    ours = _start_ray(address, workers)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        cpus = cpus_per_worker(ray.cluster_resources().get("CPU", 1), workers) if not gpus else 1.0
        resources = {"cluster": ray.cluster_resources(), "cpus_per_worker": cpus, "gpus_per_worker": gpus}
        blocks = [todo.slice(i, block) for i in range(0, todo.num_rows, block)]
        ds = ray.data.from_arrow(blocks).map_batches(
            batch_worker.Worker,
            fn_constructor_kwargs={"preset": preset, "drafters": list(drafters), "settings": settings, "world": world},
            compute=ray.data.ActorPoolStrategy(size=workers),
            batch_size=None,
            batch_format="pyarrow",
            num_cpus=cpus,
            num_gpus=gpus or None,
        )  # Ray Data's actor pools restart a worker that dies (max_restarts -1) and resend its block
        bar = tqdm(total=total, initial=len(held), unit="example", disable=not progress, desc="batch")
        for done in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            tables = {name: [] for name in TABLES}
            fresh = []
            for row in done.to_pylist():
                if row["example"] in held:  # a retried block's example: already written once
                    continue
                held[row["example"]] = row["pid"]
                fresh.append(row["example"])
                for name in TABLES:
                    part = batch_worker.rows(row[name])
                    if part is not None:
                        tables[name].append(part)
            if fresh:
                _commit(out, tables)
                bar.update(len(fresh))
                if on_part:
                    on_part(fresh, {row["pid"] for row in done.to_pylist()})
        bar.close()
        return resources
    finally:
        if ours:
            ray.shutdown()


def _manifest(out, asked, world, workers, gpus, resources, started, counts, resumed) -> dict:
    path = out / "manifest.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    held = committed(out)
    pids = sorted(set(held.values()))
    manifest = asked | {
        "versions": _versions(),
        "seeds": "greedy: none" if asked["settings"]["greedy"] else "example i: seed + i",
        "world": world,
        "workers": {
            "asked": workers,
            "gpus_per_worker": gpus,
            "pids": pids,
            "examples_by_pid": {str(p): sum(v == p for v in held.values()) for p in pids},
        },
        "ray": resources or previous.get("ray", {}),
        "runs": previous.get("runs", []) + [{"start": started, "end": _now(), "resumed_with": resumed}],
        "start": previous.get("start", started),
        "end": _now(),
        "rows": counts,
    }
    path.write_text(json.dumps(manifest, indent=1, default=str))
    return manifest
