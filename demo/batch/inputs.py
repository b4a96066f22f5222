"""The batch's examples, read with `datasets` into one Arrow table, one row each: the embedded world's
held-out examples, an imagefolder folder, or a Parquet file. A missing image stays a row (the
worker writes it to errors.parquet with its reason)."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa

from demo.session import rejections
from demo.session.batches import TASK_KINDS

SCHEMA = pa.schema(
    [
        ("example", pa.int64()),
        ("source", pa.string()),
        ("language", pa.string()),
        ("task", pa.string()),
        ("question", pa.string()),
        ("reference", pa.string()),
        ("image", pa.binary()),
        ("image_path", pa.string()),
    ]
)


def world_items(spec: dict) -> list:
    """The world's held-out examples a `world(...)` table was made of, in its order."""
    return rejections.heldout_mix(TASK_KINDS[spec["task"]], spec["n"], spec["seed"], tuple(spec["languages"]))


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")  # lossless: the worker decodes the very pixels
    return buffer.getvalue()


def world(task: str, n: int, seed: int, languages: tuple[str, ...] = ("en",)) -> pa.Table:
    import datasets

    items = world_items({"task": task, "n": n, "seed": seed, "languages": languages})
    features = datasets.Features(
        {"example": datasets.Value("int64"), **{name: datasets.Value("string") for name in SCHEMA.names[1:6]}}
        | {"image": datasets.Image(decode=False)}
    )
    rows = [
        {
            "example": i,
            "source": f"world:{item.task}:{seed}:{i}",
            "language": item.language,
            "task": item.task,
            "question": item.question,
            "reference": item.answer,
            "image": {"bytes": _png(item.image), "path": None},
        }
        for i, item in enumerate(items)
    ]
    return _table(datasets.Dataset.from_list(rows, features=features))


def folder(path: str | Path) -> pa.Table:
    """An imagefolder layout: metadata.jsonl beside the images names each image's question."""
    import datasets

    return _table(datasets.load_dataset("imagefolder", data_dir=str(path), split="train"))


def parquet(path: str | Path) -> pa.Table:
    import datasets

    return _table(datasets.load_dataset("parquet", data_files=str(path), split="train"))


def _table(ds) -> pa.Table:
    """A `datasets.Dataset` with an image column and a question column -> the batch's table."""
    import datasets

    if "question" not in ds.column_names or "image" not in ds.column_names:
        raise ValueError(f"The dataset needs an image and a question column; it has {ds.column_names}.")
    ds = ds.cast_column("image", datasets.Image(decode=False))  # bytes and path, decoded by the worker
    n = len(ds)
    column = ds.column_names

    def get(name: str, default=None) -> list:
        return list(ds[name]) if name in column else [default] * n

    images = get("image")
    reference = get("answer") if "answer" in column else get("reference")
    sources = [Path(im["path"]).name if im and im.get("path") else None for im in images]
    return pa.table(
        {
            "example": get("example") if "example" in column else list(range(n)),
            "source": get("source") if "source" in column else [s or f"row {i}" for i, s in enumerate(sources)],
            "language": get("language", "en"),
            "task": get("task", "question"),
            "question": get("question"),
            "reference": reference,
            "image": [im.get("bytes") if im else None for im in images],
            "image_path": [im.get("path") if im else None for im in images],
        },
        schema=SCHEMA,
    )
