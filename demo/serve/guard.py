"""The front door (docs/reliability.md): ASGI middleware that checks every way in before Gradio sees
it (`demo.page.server.launch` installs it). A malformed body or wrong values get 4xx with a
sentence, never 500; a join beyond its visitor's share 429; uploads are capped per request, per
visitor and per folder."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path

import anyio
from gradio_client.utils import construct_args

from demo.serve import upload_folder, visitors
from demo.session.validate import MAX_FILE_BYTES

MIB = 2**20
UPLOAD_FOLDER_ENV = "DEMO_UPLOAD_FOLDER_MIB"  # the upload folder's size cap, MiB
UPLOAD_RATE_ENV = "DEMO_UPLOAD_MIB_PER_MINUTE"  # what one client may upload in any minute, MiB
UPLOAD_FOLDER_MIB = 1024  # default: a Space has 50 GB of disk; 1 GiB holds ~100 images at the size limit
UPLOAD_MIB_PER_MINUTE = 60  # default: six images at the size limit a minute; a person uploads a few
UPLOAD_FILES_ENV = "DEMO_UPLOAD_FILES_PER_MINUTE"  # files one visitor may upload in any minute
UPLOAD_FILES_PER_MINUTE = 120  # two a second: gradio_client sends the image again with every call
MAX_UPLOAD_REQUEST = MAX_FILE_BYTES + MIB  # one file at the limit and its multipart envelope
MAX_CALL_BODY = 4 * MIB  # a queue join or direct call is JSON with a file reference, never the file
CALLS = ("/gradio_api/queue/join", "/gradio_api/run/", "/gradio_api/api/", "/gradio_api/call/")
V2 = "/gradio_api/call/v2/"
GUARDED = "demo.guarded"  # the key the guard sets in the scope of every call it checked
UPLOAD = "/gradio_api/upload"
MCP = "/gradio_api/mcp"  # MCP messages: capped as a call's body; a tool call then joins through CALLS
BODY = "object with the call's values as a list under 'data'"  # what a call's body must be


def setting(name: str, default: int) -> int:
    """A whole-number setting from the environment (`default` when unset or not a positive number)."""
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else default


class RateLimit:
    """Bytes (or files) per visitor over a sliding minute: `admit(client, n)` -> 0 (admitted, counted)
    or the seconds until `n` more would fit; `wait(client, n)` the same without counting. One request
    larger than the whole minute's allowance passes alone, unless `strict`."""

    def __init__(self, per_minute: int, window: float = 60.0, strict: bool = False):
        self.per_minute, self.window, self.strict = per_minute, window, strict
        self.sent: dict[str, deque[tuple[float, int]]] = defaultdict(deque)
        self.lock = threading.Lock()

    def admit(self, client: str, n: int, now: float | None = None) -> float:
        return self.wait(client, n, now, count=True)

    def wait(self, client: str, n: int, now: float | None = None, count: bool = False) -> float:
        now = time.monotonic() if now is None else now
        with self.lock:
            for key in list(self.sent):  # forget the minutes gone by, and the clients with them
                sent = self.sent[key]
                while sent and sent[0][0] <= now - self.window:
                    sent.popleft()
                if not sent:
                    del self.sent[key]
            sent = self.sent.get(client, deque())
            total = sum(size for _, size in sent)
            if total + n <= self.per_minute or (not sent and not self.strict):
                if count:
                    self.sent[client].append((now, n))
                return 0.0
            if not sent:  # strict, and more than a whole minute allows: never
                return self.window
            freed = 0  # wait until enough of the oldest uploads have left the window
            for at, size in sent:
                freed += size
                if total - freed + n <= self.per_minute:
                    return at + self.window - now
            return sent[-1][0] + self.window - now


def deletable(blocks) -> set[str]:
    """The files Gradio's own cache sweep (`delete_cache`) may delete: uploads and the copies of
    outputs, not those a component keeps (the examples)."""
    kept = set().union(*(getattr(b, "keep_in_cache", set()) for b in list(blocks.blocks.values())))
    return {f for files in list(blocks.temp_file_sets) for f in list(files)} - kept


def forget(blocks, deleted: list[str]) -> None:
    """Drop deleted files from Gradio's sets, as its own sweep does (a few set operations a file)."""
    for files in list(blocks.temp_file_sets):
        files.difference_update(deleted)


def uploaded_paths(body: bytes) -> list[str]:
    """The paths Gradio's upload answer lists (a JSON list of strings), or [] if it is not one."""
    try:
        paths = json.loads(body)
    except (ValueError, RecursionError):
        return []
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []


# How failures.message begins the sentence of an unexpected error: a fault of the server, not the call.
SERVER_FAULT = "Something went wrong on the server"


def _as_4xx(send):
    """`send` for a direct call (/run), whose every failure Gradio answers 500: a failure the app
    explained in a sentence (a value refused) becomes 422 with that sentence, one it did not explain
    422 with a sentence of the guard's; only the app's own server faults stay 500."""
    held: list[dict] = []

    async def sending(message):
        if message["type"] == "http.response.start" and message.get("status") == 500:
            held.append(message)
            return
        if not held:
            return await send(message)
        held.append(message)
        if message.get("more_body"):
            return
        body = b"".join(m.get("body", b"") for m in held[1:])
        try:
            error = json.loads(body).get("error")
        except (ValueError, AttributeError, RecursionError):
            error = None
        if isinstance(error, str) and error.startswith(SERVER_FAULT):
            for kept in held:
                await send(kept)
            return
        detail = error if isinstance(error, str) and error else "These values cannot be used by this function."
        await _answer(send, 422, detail)

    return sending


async def _body(receive, send, what: str) -> bytes | None:
    """A request's body; None when the client went away, or past MAX_CALL_BODY (then answered 413)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > MAX_CALL_BODY:
            return await _answer(send, 413, f"{what} may be at most {MAX_CALL_BODY // MIB} MiB of JSON.")
        if not message.get("more_body"):
            return b"".join(chunks)


def _replaying(body: bytes, receive):
    """A receive that gives the body read once more, then the client's own messages."""
    replayed = False

    async def replay():
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _session(scope, path: str, body: bytes) -> str | None:
    """The session of a join that gradio_client sent (it says so in x-gradio-user), or None."""
    if not path.startswith("/gradio_api/queue/join") or (b"x-gradio-user", b"api") not in scope.get("headers", []):
        return None
    session = json.loads(body).get("session_hash")
    return session if isinstance(session, str) and session else None


async def _answer(send, status: int, detail: str, headers: tuple = (), key: str = "detail") -> None:
    body = json.dumps({key: detail}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """The ASGI middleware: uploads, calls and MCP messages checked before the app sees them.
    `arity(block_fn, n)` is the sentence refusing `n` values for the function, or None when `n`
    will do (`demo.page.server.arity_refusal`); `folder()` is the upload folder."""

    def __init__(self, app, arity: Callable, folder: Callable[[], Path]):
        self.app, self.arity, self.folder = app, arity, folder
        self.folder_cap = setting(UPLOAD_FOLDER_ENV, UPLOAD_FOLDER_MIB) * MIB
        self.rate = RateLimit(setting(UPLOAD_RATE_ENV, UPLOAD_MIB_PER_MINUTE) * MIB)
        self.files = RateLimit(setting(UPLOAD_FILES_ENV, UPLOAD_FILES_PER_MINUTE), strict=True)
        self.folder_ledger = upload_folder.Ledger(self.folder_cap)
        self.share = visitors.Share()
        self.api_info = None  # the named endpoints' parameters, read once (the page does not change)

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if scope.get("method") == "POST" and path.rstrip("/") == UPLOAD:
            return await self._upload(scope, receive, send)
        if scope.get("method") == "POST" and path.startswith(CALLS):
            scope[GUARDED] = True  # what reaches a handler from here on has passed the checks below
            return await self._call(scope, receive, send, path)
        if scope.get("method") == "POST" and path.startswith(MCP):
            return await self._mcp(scope, receive, send)
        return await self.app(scope, receive, send)

    async def _mcp(self, scope, receive, send):
        """An MCP message: at most MAX_CALL_BODY; its tool call reaches the page as a queue join from
        this server (Gradio's loopback client, with the caller's headers), so through `_call`."""
        body = await _body(receive, send, "An MCP message")
        if body is not None:
            await self.app(scope, _replaying(body, receive), send)

    async def _call(self, scope, receive, send, path: str):
        body = await _body(receive, send, "A call's body")
        if body is None:
            return
        refused, block_fn, data = self._refusal(scope, path, body)
        if refused:
            return await _answer(send, *refused)
        replay = _replaying(body, receive)

        if block_fn is None or not block_fn.queue:  # a direct call of the page's small events
            return await self.app(scope, replay, _as_4xx(send))
        queue, visitor = scope["app"].get_blocks()._queue, visitors.visitor_of(scope)
        refused = self.folder_ledger.evicted_in(data)
        status = 410
        if not refused:
            refused, status = self.share.refusal(queue, block_fn.concurrency_id, visitor), 429
        if refused:
            session = _session(scope, path, body)
            if session:  # gradio_client: the sentence as the call's error (its AppError)
                return await _answer(send, 200, visitors.tell(queue, session, refused), key="event_id")
            return await _answer(send, status, refused)
        visitors.make_place(queue, visitor)
        self.folder_ledger.raced(data)
        with self.share.joining(queue, block_fn.concurrency_id, visitor):
            return await self.app(scope, replay, send)

    def _refusal(self, scope, path: str, body: bytes) -> tuple[tuple[int, str] | None, object, list]:
        """((status, sentence) for a call body the app must not see, or None; the function it calls,
        None where the body does not say; the values it sends, in the function's order)."""
        try:
            payload = json.loads(body or b"null")
        except ValueError:
            return (400, f"The body must be JSON: an {BODY}."), None, []
        except RecursionError:  # arrays or objects nested thousands deep: Python's parser gives up
            return (400, f"The body is nested too deeply: send an {BODY}."), None, []
        if not isinstance(payload, dict):
            return (422, f"The body must be a JSON {BODY}."), None, []
        data = payload.get("data") if isinstance(payload.get("data"), list) else []
        blocks = scope["app"].get_blocks()
        public = {i: fn for i, fn in blocks.fns.items() if getattr(fn, "api_visibility", "public") == "public"}
        fn_index = payload.get("fn_index")
        # bool is an int to Python (True would be function 1), never to a caller
        if fn_index is not None and (type(fn_index) is not int or fn_index not in blocks.fns):
            known = ", ".join(f"{i} (/{fn.api_name})" for i, fn in public.items() if fn.api_name)
            return (422, f"No function has fn_index {fn_index!r}; the API's are {known}."), None, data
        if path.startswith("/gradio_api/queue/join"):
            # a join's values are checked in the queue, which sends its sentence as the result
            return None, blocks.fns.get(fn_index) if fn_index is not None else None, data
        name = path.rstrip("/").rsplit("/", 1)[-1]
        keywords = path.startswith(V2)  # /call/v2/NAME: the values by parameter name
        if name == "predict" and fn_index is not None and not keywords:  # the page's own unqueued events
            block_fn = blocks.fns[fn_index]
        else:
            named = public.values() if keywords else blocks.fns.values()
            block_fn = next((fn for fn in named if fn.api_name == name), None)
        if block_fn is None:
            names = ", ".join(f"/{fn.api_name}" for fn in public.values() if fn.api_name)
            return (404, f"There is no endpoint /{name}; the API has {names}."), None, data
        if keywords:
            try:
                data = self._by_name(blocks, name, payload)
            except (TypeError, ValueError) as error:
                return (422, f"/{name}: {error}".split(" Please click")[0]), block_fn, data
        refused = self.arity(block_fn, len(data)) if isinstance(payload.get("data"), list) or keywords else None
        if refused:
            return (422, refused), block_fn, data
        if block_fn.queue and not path.startswith("/gradio_api/call/"):
            api = block_fn.api_name
            queued = (
                f"/{api} runs in the queue, one request at a time, so that every visitor gets a turn: call it through "
                f"the queue (gradio_client, or POST /gradio_api/call/{api} and then GET its result), not as a direct "
                "/run call."
            )
            return (403, queued), block_fn, data
        return None, block_fn, data  # a missing or mistyped 'data' is refused by Gradio's own 422

    def _by_name(self, blocks, name: str, payload: dict) -> list:
        """A /call/v2 body's values in the endpoint's order, as Gradio reads them (its own sentence
        for a name it does not know or a value left out without a default)."""
        if self.api_info is None:
            self.api_info = blocks.get_api_info()["named_endpoints"]
        parameters = self.api_info[f"/{name}"]["parameters"]
        return construct_args(parameters, (), {k: v for k, v in payload.items() if k != "oauth_token"})

    async def _upload(self, scope, receive, send):
        headers = dict(scope.get("headers") or [])
        claimed = headers.get(b"content-length", b"").decode("latin-1")
        size = int(claimed) if claimed.isdigit() else MAX_UPLOAD_REQUEST
        if size > MAX_UPLOAD_REQUEST:
            return await _answer(
                send, 413, f"An upload may be at most {MAX_FILE_BYTES // MIB} MiB: one image at the size limit."
            )
        visitor = visitors.visitor_of(scope)
        wait = self.rate.admit(visitor, size)
        if wait:
            return await self._too_many(send, f"{self.rate.per_minute // MIB} MiB", wait)
        wait = self.files.wait(visitor, 1)  # counted once Gradio says how many files it took
        if wait:
            return await self._too_many(send, f"{self.files.per_minute} files", wait)
        blocks = scope["app"].get_blocks()
        await anyio.to_thread.run_sync(self._make_room, blocks, size, visitor)
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > MAX_UPLOAD_REQUEST:  # more than it claimed: cut it off
                return {"type": "http.disconnect"}
            return message

        held: list[dict] = []  # Gradio's answer, held until its files are counted

        async def hold(message):
            held.append(message)

        await self.app(scope, counted, hold)  # returns once Gradio has moved the files into the folder
        status = next((m.get("status") for m in held if m["type"] == "http.response.start"), None)
        paths = uploaded_paths(b"".join(m.get("body", b"") for m in held)) if status == 200 else []
        wait = self.files.admit(visitor, len(paths)) if paths else 0
        if wait:  # more files than the visitor's minute allows: none of them is kept
            await anyio.to_thread.run_sync(_delete, blocks, paths)
            return await self._too_many(send, f"{self.files.per_minute} files", wait)
        self.folder_ledger.add(paths, visitor)
        for message in held:
            await send(message)

    async def _too_many(self, send, limit: str, wait: float) -> None:
        await _answer(
            send,
            429,
            f"Too many uploads: each visitor may upload {limit} a minute. Try again in {wait:.0f} s.",
            ((b"retry-after", str(max(1, round(wait))).encode()),),
        )

    def _make_room(self, blocks, size: int, visitor: str) -> None:
        ledger = self.folder_ledger
        if not ledger.started:  # the files a restart found there: one walk, at the first upload
            ledger.start(sorted(deletable(blocks)))
        forget(blocks, ledger.make_room(size, visitor))


def _delete(blocks, paths: list[str]) -> None:
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass
    forget(blocks, paths)
