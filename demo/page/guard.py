"""The server's front door: what a request body and an upload may be, checked before Gradio sees them.

`Guard` is an ASGI middleware in front of Gradio's app (`demo.page.server.launch` installs it):

    POST /gradio_api/queue/join, /gradio_api/run/NAME (and /api/NAME, /call/NAME)
        a body that is not a JSON object, names a function the page does not have, or (on /run,
        where Gradio would answer 500) sends the wrong number of values is answered 4xx with a
        sentence, never 500: Gradio looks the function up without checking, and answers a
        failed direct call with 500 whatever the cause
    POST /gradio_api/upload
        one request carries at most MAX_UPLOAD_REQUEST bytes (one file at the page's limit, with
        room for the form around it), whatever it claims; each client may send UPLOAD_MIB_PER_MINUTE
        in any minute (429 with Retry-After beyond it); and before each upload the upload folder
        is trimmed, oldest files first, to UPLOAD_FOLDER_MIB less the upload's size, so the folder
        holds at most that plus the uploads in flight. Only files Gradio's own hourly sweep would
        delete go (uploads, copies of outputs), never the example gallery's

Gradio 6.31 offers no hook for limiting /gradio_api/upload (its only dependency is the login
check), so the limits live here. A client is its socket's address; on a Space, where every
request comes through the hub's proxy, it is the last X-Forwarded-For address (the one that
proxy added).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path

import anyio

from demo.models import zerogpu
from demo.session.validate import MAX_FILE_BYTES

MIB = 2**20
UPLOAD_FOLDER_ENV = "DEMO_UPLOAD_FOLDER_MIB"  # the upload folder's size cap, MiB
UPLOAD_RATE_ENV = "DEMO_UPLOAD_MIB_PER_MINUTE"  # what one client may upload in any minute, MiB
UPLOAD_FOLDER_MIB = 1024  # default: a Space has 50 GB of disk; 1 GiB holds ~100 images at the size limit
UPLOAD_MIB_PER_MINUTE = 60  # default: six images at the size limit a minute; a person uploads a few
MAX_UPLOAD_REQUEST = MAX_FILE_BYTES + MIB  # one file at the limit and its multipart envelope
MAX_CALL_BODY = 4 * MIB  # a queue join or direct call is JSON with a file reference, never the file
CALLS = ("/gradio_api/queue/join", "/gradio_api/run/", "/gradio_api/api/", "/gradio_api/call/")
UPLOAD = "/gradio_api/upload"


def setting(name: str, default: int) -> int:
    """A whole-number setting from the environment (`default` when unset or not a positive number)."""
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else default


class RateLimit:
    """Bytes per client over a sliding minute: `admit(client, n)` -> 0 (admitted, counted) or the
    seconds until `n` more would fit."""

    def __init__(self, per_minute: int, window: float = 60.0):
        self.per_minute, self.window = per_minute, window
        self.sent: dict[str, deque[tuple[float, int]]] = defaultdict(deque)
        self.lock = threading.Lock()

    def admit(self, client: str, n: int, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self.lock:
            for key in list(self.sent):  # forget the minutes gone by, and the clients with them
                sent = self.sent[key]
                while sent and sent[0][0] <= now - self.window:
                    sent.popleft()
                if not sent:
                    del self.sent[key]
            sent = self.sent[client]
            total = sum(size for _, size in sent)
            if total + n <= self.per_minute or not sent:
                sent.append((now, n))
                return 0.0
            freed = 0  # wait until enough of the oldest uploads have left the window
            for at, size in sent:
                freed += size
                if total - freed + n <= self.per_minute:
                    return at + self.window - now
            return sent[-1][0] + self.window - now


def trim(folder: Path, keep: int, deletable: set[str]) -> set[str]:
    """Delete the oldest of the `deletable` files in `folder` (by modification time) until the folder
    holds at most `keep` bytes, or none is left to delete; returns the paths deleted. Files that
    vanish meanwhile (Gradio's own sweep) are skipped."""
    files, total = [], 0
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            total += stat.st_size
            if path in deletable:
                files.append((stat.st_mtime, stat.st_size, path))
    deleted = set()
    for _, size, path in sorted(files):
        if total <= keep:
            break
        try:
            os.remove(path)
        except OSError:
            continue
        total -= size
        deleted.add(path)
    return deleted


def deletable(blocks) -> set[str]:
    """The files Gradio's own cache sweep (`delete_cache`) may delete: uploads and the copies of
    outputs, not those a component keeps (the examples)."""
    kept = set().union(*(getattr(b, "keep_in_cache", set()) for b in list(blocks.blocks.values())))
    return {f for files in list(blocks.temp_file_sets) for f in list(files)} - kept


def forget(blocks, deleted: set[str]) -> None:
    """Drop deleted files from Gradio's sets, as its own sweep does."""
    for files in list(blocks.temp_file_sets):
        files.difference_update(deleted)


def client_of(scope) -> str:
    """Who sent the request, for the rate limit (see the module docstring)."""
    if zerogpu.on_space():
        headers = dict(scope.get("headers") or [])
        forwarded = headers.get(b"x-forwarded-for", b"").decode("latin-1")
        if forwarded.strip():
            return forwarded.split(",")[-1].strip()
    client = scope.get("client")
    return client[0] if client else "?"


async def _answer(send, status: int, detail: str, headers: tuple = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """The ASGI middleware (see the module docstring). `arity(block_fn, n)` is the sentence refusing
    `n` values for the function, or None when `n` will do (`demo.page.server.arity_refusal`);
    `folder()` is the upload folder."""

    def __init__(self, app, arity: Callable, folder: Callable[[], Path]):
        self.app, self.arity, self.folder = app, arity, folder
        self.folder_cap = setting(UPLOAD_FOLDER_ENV, UPLOAD_FOLDER_MIB) * MIB
        self.rate = RateLimit(setting(UPLOAD_RATE_ENV, UPLOAD_MIB_PER_MINUTE) * MIB)
        self.trimming = threading.Lock()

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if scope.get("method") == "POST" and path.rstrip("/") == UPLOAD:
            return await self._upload(scope, receive, send)
        if scope.get("method") == "POST" and path.startswith(CALLS) and not path.startswith("/gradio_api/call/v2"):
            return await self._call(scope, receive, send, path)
        return await self.app(scope, receive, send)

    async def _call(self, scope, receive, send, path: str):
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_CALL_BODY:
                return await _answer(send, 413, f"A call's body may be at most {MAX_CALL_BODY // MIB} MiB of JSON.")
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        refused = self._refusal(scope, path, body)
        if refused:
            return await _answer(send, *refused)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    def _refusal(self, scope, path: str, body: bytes) -> tuple[int, str] | None:
        """(status, sentence) for a call body the app must not see, or None."""
        try:
            payload = json.loads(body or b"null")
        except ValueError:
            return 400, "The body must be JSON: an object with the call's values as a list under 'data'."
        if not isinstance(payload, dict):
            return 422, "The body must be a JSON object with the call's values as a list under 'data'."
        blocks = scope["app"].get_blocks()
        public = {i: fn for i, fn in blocks.fns.items() if getattr(fn, "api_visibility", "public") == "public"}
        fn_index = payload.get("fn_index")
        if fn_index is not None and (not isinstance(fn_index, int) or fn_index not in blocks.fns):
            known = ", ".join(f"{i} (/{fn.api_name})" for i, fn in public.items() if fn.api_name)
            return 422, f"No function has fn_index {fn_index!r}; the API's are {known}."
        if path.startswith("/gradio_api/queue/join"):
            return None  # a join's values are checked in the queue, which sends its sentence as the result
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if name == "predict" and fn_index is not None:  # the page's own unqueued events: /run/predict + fn_index
            block_fn = blocks.fns[fn_index]
        else:
            block_fn = next((fn for fn in blocks.fns.values() if fn.api_name == name), None)
        if block_fn is None:
            names = ", ".join(f"/{fn.api_name}" for fn in public.values() if fn.api_name)
            return 404, f"There is no endpoint /{name}; the API has {names}."
        data = payload.get("data")
        if isinstance(data, list):
            refused = self.arity(block_fn, len(data))
            return (422, refused) if refused else None
        return None  # a missing or mistyped 'data' is refused by Gradio's own 422

    async def _upload(self, scope, receive, send):
        headers = dict(scope.get("headers") or [])
        claimed = headers.get(b"content-length", b"").decode("latin-1")
        size = int(claimed) if claimed.isdigit() else MAX_UPLOAD_REQUEST
        if size > MAX_UPLOAD_REQUEST:
            return await _answer(
                send, 413, f"An upload may be at most {MAX_FILE_BYTES // MIB} MiB: one image at the size limit."
            )
        wait = self.rate.admit(client_of(scope), size)
        if wait:
            limit = self.rate.per_minute // MIB
            return await _answer(
                send,
                429,
                f"Too many uploads: each visitor may upload {limit} MiB a minute. Try again in {wait:.0f} s.",
                ((b"retry-after", str(max(1, round(wait))).encode()),),
            )
        await anyio.to_thread.run_sync(self._make_room, scope["app"].get_blocks(), size)
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > MAX_UPLOAD_REQUEST:  # more than it claimed: cut it off
                return {"type": "http.disconnect"}
            return message

        return await self.app(scope, counted, send)

    def _make_room(self, blocks, size: int) -> None:
        with self.trimming:  # one trim at a time; the others find the folder already trimmed
            forget(blocks, trim(self.folder(), max(0, self.folder_cap - size), deletable(blocks)))
