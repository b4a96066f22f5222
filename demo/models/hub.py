"""Where a preset's files are: a local directory, the Hugging Face cache, or (only if allowed) the hub.

Model ids come from the presets only: `resolve` and `availability` are called with the paths and
hub ids that `demo.models.presets.PRESETS` names, never with user input.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, snapshot_download

ALLOW_DOWNLOADS = "DEMO_ALLOW_DOWNLOADS"
PROBE_SECONDS = 6.0  # the longest `availability` waits for the hub
FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]  # no code, ever
LEGACY_WEIGHTS = ["pytorch_model*.bin"]  # fetched only when a repo has no safetensors


class Unavailable(RuntimeError):
    """A preset's files are not on this machine and cannot be fetched now; the message says why."""


@dataclass(frozen=True)
class Availability:
    ok: bool  # the preset can be loaded now (its files are here, or may be downloaded)
    local: bool  # every file is already on this machine
    message: str  # one or two sentences for the UI


def is_hub_id(ref: str) -> bool:
    """A hub id ("org/name") rather than a local directory."""
    return not (os.path.isabs(ref) or ref.startswith(".") or Path(ref).exists())


def offline() -> bool:
    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return constants.HF_HUB_OFFLINE or flag in {"1", "ON", "YES", "TRUE"}


def downloads_allowed() -> bool:
    return os.environ.get(ALLOW_DOWNLOADS, "").strip() == "1" and not offline()


def complete(path: Path) -> bool:
    """The directory holds a config and all of its weights."""
    if not (path / "config.json").is_file():
        return False
    indexes = sorted(path.glob("*.index.json"))  # sharded weights: every shard must be here
    if indexes:
        shards = set(json.loads(indexes[0].read_text())["weight_map"].values())
        return all((path / shard).is_file() for shard in shards)
    return any(path.glob("*.safetensors")) or any(path.glob("pytorch_model*.bin"))


def cached(repo: str) -> Path | None:
    """The repo's snapshot in the local Hugging Face cache, if it is there in full."""
    try:
        path = Path(snapshot_download(repo, local_files_only=True))
    except (OSError, ValueError):  # LocalEntryNotFoundError is an OSError; a malformed id a ValueError
        return None
    return path if complete(path) else None


def local(ref: str) -> Path | None:
    """The directory a preset's path or hub id loads from, if its files are already here."""
    if not is_hub_id(ref):
        path = Path(ref)
        return path if complete(path) else None
    return cached(ref)


def probe(repo: str, seconds: float = PROBE_SECONDS) -> str | None:
    """Ask the hub for the repo's config; None if it answered, else why not. Never takes longer than `seconds`."""
    outcome: list[str | None] = []

    def ask():
        try:
            get_hf_file_metadata(hf_hub_url(repo, "config.json"), timeout=seconds)
            outcome.append(None)
        except Exception as error:  # any failure means the same to the user: it cannot be had now
            outcome.append(f"{type(error).__name__}: {error}")

    thread = threading.Thread(target=ask, daemon=True)  # name resolution ignores timeouts: don't wait on it
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else f"no answer within {seconds:.0f} s"


def availability(refs: list[str]) -> Availability:
    """Whether the paths and hub ids of one preset can be loaded, and a message saying so."""
    missing_dirs = [r for r in refs if not is_hub_id(r) and local(r) is None]
    if missing_dirs:
        return Availability(False, False, f"Model files missing: {', '.join(missing_dirs)}.")
    missing = [r for r in refs if is_hub_id(r) and cached(r) is None]
    if not missing:
        return Availability(True, True, "All model files are on this machine.")
    names = ", ".join(missing)
    absent = f"Not in the local Hugging Face cache: {names}"
    if offline():
        return Availability(False, False, f"{absent}; the hub is off (HF_HUB_OFFLINE=1).")
    if not downloads_allowed():
        fetch = f"set {ALLOW_DOWNLOADS}=1 to fetch them, or put them in the cache beforehand"
        return Availability(False, False, f"{absent}. Downloads are off: {fetch}.")
    reason = probe(missing[0])
    if reason is not None:
        return Availability(False, False, f"{absent}, and the hub cannot be reached ({reason}).")
    return Availability(True, False, f"Will be downloaded on first use: {names}.")


def resolve(ref: str) -> Path:
    """The local directory of a preset's path or hub id, downloading it if allowed; else Unavailable."""
    path = local(ref)
    if path is not None:
        return path
    if not is_hub_id(ref):
        raise Unavailable(f"Model files missing: {ref}.")
    if not downloads_allowed():
        raise Unavailable(availability([ref]).message)
    try:
        path = Path(snapshot_download(ref, allow_patterns=FILES, etag_timeout=PROBE_SECONDS))
        if not complete(path):
            path = Path(snapshot_download(ref, allow_patterns=LEGACY_WEIGHTS, etag_timeout=PROBE_SECONDS))
    except Exception as error:
        raise Unavailable(f"Could not download {ref}: {type(error).__name__}: {error}") from error
    if not complete(path):
        raise Unavailable(f"{ref} has no config.json or no weights this demo can read.")
    return path


def count_params(path: Path) -> int:
    """Parameters stored in a model directory, read from the safetensors headers (0 if unknown)."""
    total = 0
    for file in sorted(path.glob("*.safetensors")):
        with open(file, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    if total:
        return total
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
    stored = config.get("dtype") or config.get("torch_dtype") or "float32"
    width = {"float32": 4, "float16": 2, "bfloat16": 2}.get(stored, 4)
    return sum(f.stat().st_size for f in path.glob("pytorch_model*.bin")) // width
