"""The upload folder's ledger (docs/reliability.md): whose files it holds, kept as uploads come and go
(no upload walks the folder), and the trim that makes room for the next upload."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from itertools import islice

RESERVE_FILES = 2  # a visitor's newest images that another visitor's upload cannot evict...
RESERVE_S = 600.0  # ...while younger than this and not raced
MAX_AGE_S = 3600.0 + 600.0  # Gradio's sweep deletes files older than an hour, every 10 minutes
EVICTED_KEPT = 20_000  # evicted paths remembered, to tell a race naming one what happened
EVICTED = "Your image was removed to make room for other uploads; upload it again, then run."


@dataclass
class Upload:
    path: str
    size: int
    visitor: str
    at: float  # time.monotonic() when stored
    raced: bool = False


def _paths(data) -> list[str]:
    """The file paths a call's values name (Gradio file values {"path": ...}, at the top level)."""
    values = data if isinstance(data, list) else []
    return [v["path"] for v in values if isinstance(v, dict) and isinstance(v.get("path"), str)]


class Ledger:
    """The upload folder's files and their visitors; `cap` in bytes."""

    def __init__(self, cap: int, reserve_files: int = RESERVE_FILES, reserve_s: float = RESERVE_S):
        self.cap, self.reserve_files, self.reserve_s = cap, reserve_files, reserve_s
        self.files: OrderedDict[str, Upload] = OrderedDict()  # oldest first
        self.by_visitor: dict[str, OrderedDict[str, Upload]] = {}
        self.held: dict[str, int] = {}  # bytes per visitor
        self.total = 0
        self.evicted: OrderedDict[str, float] = OrderedDict()
        self.started = False
        self.lock = threading.RLock()

    def start(self, files: list[str]) -> None:
        """Record the files already in the folder (those Gradio's sweep may delete), as nobody's."""
        with self.lock:
            if not self.started:
                self.started = True
                self.add(files, "?")

    def add(self, paths: list[str], visitor: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self.lock:
            for path in paths:
                try:
                    size = os.stat(path).st_size
                except OSError:
                    continue
                self._drop(path)
                self.evicted.pop(path, None)  # the same bytes stored again: that image is back
                upload = Upload(path, size, visitor, now)
                self.files[path] = upload
                self.by_visitor.setdefault(visitor, OrderedDict())[path] = upload
                self.held[visitor] = self.held.get(visitor, 0) + size
                self.total += size

    def _drop(self, path: str) -> Upload | None:
        upload = self.files.pop(path, None)
        if upload is not None:
            mine = self.by_visitor[upload.visitor]
            del mine[path]
            self.held[upload.visitor] -= upload.size
            if not mine:
                del self.by_visitor[upload.visitor], self.held[upload.visitor]
            self.total -= upload.size
        return upload

    def reserved(self, upload: Upload, now: float) -> bool:
        """Whether `upload` is among its visitor's RESERVE_FILES newest, younger than RESERVE_S and not
        raced: another visitor's upload evicts it only when such images alone fill the folder."""
        if upload.raced or now - upload.at >= self.reserve_s or upload.visitor == "?":
            return False
        newest = islice(reversed(self.by_visitor[upload.visitor].values()), self.reserve_files)
        return any(upload is mine for mine in newest)

    def _expire(self, now: float) -> None:
        while self.files:
            upload = next(iter(self.files.values()))
            if now - upload.at < MAX_AGE_S:
                break
            self._drop(upload.path)

    def make_room(self, size: int, visitor: str, now: float | None = None) -> list[str]:
        """Delete files until `size` more bytes fit the cap: the uploader's own, then others' (the
        largest holder's first), each oldest first, reserved ones last; returns the paths deleted."""
        now = time.monotonic() if now is None else now
        with self.lock:
            self._expire(now)
            need = self.total + size - self.cap
            if need <= 0:
                return []
            plan: list[Upload] = []
            others = sorted((v for v in self.by_visitor if v != visitor), key=lambda v: -self.held[v])
            reserved = []
            for owner in (visitor, *others):
                for upload in self.by_visitor.get(owner, {}).values():  # oldest first, until enough
                    if need <= 0:
                        break
                    if owner == visitor or not self.reserved(upload, now):
                        plan.append(upload)
                        need -= upload.size
                    else:
                        reserved.append(upload)
            for upload in sorted(reserved, key=lambda u: u.at):  # the folder is full of them: oldest first
                if need <= 0:
                    break
                plan.append(upload)
                need -= upload.size
            for upload in plan:
                try:
                    os.remove(upload.path)
                except OSError:
                    pass  # gone already (Gradio's sweep): its bytes are free all the same
                self._drop(upload.path)
                self.evicted[upload.path] = now
            while len(self.evicted) > EVICTED_KEPT:
                self.evicted.popitem(last=False)
            return [upload.path for upload in plan]

    def raced(self, data) -> None:
        with self.lock:
            for path in _paths(data):
                if path in self.files:
                    self.files[path].raced = True

    def evicted_in(self, data) -> str | None:
        with self.lock:
            return EVICTED if any(path in self.evicted for path in _paths(data)) else None
