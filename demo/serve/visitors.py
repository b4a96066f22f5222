"""Who a request comes from (`visitor_of`) and each visitor's share of the queues: one running and one
waiting request per queue, the waiting list in visitor order, round robin (docs/reliability.md).
It reads Gradio 6.31's queue and changes only its waiting lists."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import uuid
from collections import Counter
from contextlib import contextmanager

from gradio.server_messages import ProcessCompletedMessage

from demo.models import zerogpu

PROXY_HOPS_ENV = "DEMO_PROXY_HOPS"  # proxies in front of the app that append to X-Forwarded-For
RUNNING_AND_WAITING = 2  # a visitor's requests in one queue: one running and one waiting
NAMES = {"race": "race", "analysis": "analysis"}  # what a queue's requests are called in the sentence


def proxy_hops() -> int:
    """The proxies whose X-Forwarded-For entries are trusted: DEMO_PROXY_HOPS, or 1 on a Space
    and 0 elsewhere."""
    value = os.environ.get(PROXY_HOPS_ENV, "").strip()
    if value.isdigit():
        return int(value)
    return 1 if zerogpu.on_space() else 0


def _network(address: str) -> str:
    """An address as a visitor: IPv4 as it is, IPv6 as its /64 network, anything else unchanged."""
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return address.strip()
    if ip.version == 6:
        if ip.ipv4_mapped is not None:  # ::ffff:a.b.c.d is the IPv4 visitor a.b.c.d
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def visitor_of(scope) -> str:
    """The visitor an ASGI request (its scope) comes from: the socket's address (IPv6: its /64), or
    with proxies trusted the X-Forwarded-For entry `proxy_hops()` from the right (forged ones sit left)."""
    hops = proxy_hops()
    if hops:
        forwarded = b",".join(value for name, value in scope.get("headers") or [] if name == b"x-forwarded-for")
        entries = [entry.strip() for entry in forwarded.decode("latin-1").split(",") if entry.strip()]
        if len(entries) >= hops:
            return _network(entries[-hops])
    client = scope.get("client")
    return _network(client[0]) if client else "?"


def _owner(event) -> str:
    request = getattr(event, "request", None)
    return visitor_of(request.scope) if request is not None else event._id


def _running(queue, concurrency_id: str) -> list:
    return [e for job in list(queue.active_jobs) if job for e in job if e.concurrency_id == concurrency_id]


def _held(queue, concurrency_id: str, visitor: str) -> tuple[int, int]:
    """(running, waiting) requests of `visitor` in Gradio's queue `concurrency_id`."""
    running = _running(queue, concurrency_id)
    waiting_list = queue.event_queue_per_concurrency_id.get(concurrency_id)
    waiting = list(waiting_list.queue) if waiting_list else []
    return sum(_owner(e) == visitor for e in running), sum(_owner(e) == visitor for e in waiting)


def fair(queue, concurrency_id: str) -> None:
    """Put the waiting list of `concurrency_id` in visitor order, round robin (stable): a request
    waits behind the others' requests that have fewer of their visitor's running or ahead of them."""
    waiting_list = queue.event_queue_per_concurrency_id.get(concurrency_id)
    if not waiting_list or len(waiting_list.queue) < 2:
        return
    ahead = Counter(_owner(event) for event in _running(queue, concurrency_id))
    ranked = []
    for position, event in enumerate(waiting_list.queue):
        visitor = _owner(event)
        ranked.append((ahead[visitor], position, event))
        ahead[visitor] += 1
    waiting_list.queue[:] = [event for _, _, event in sorted(ranked, key=lambda r: r[:2])]


def _held_words(name: str, running: int, waiting: int) -> str:
    """E.g. "a race running and one waiting", "two analyses waiting"."""
    plural = name[:-2] + "es" if name.endswith("is") else name + "s"
    words = {1: "one", 2: "two", 3: "three"}

    def lead(n: int) -> str:
        return f"a {name}" if n == 1 else f"{words.get(n, n)} {plural}"

    if running and waiting:
        return f"{lead(running)} running and {words.get(waiting, waiting)} waiting"
    return f"{lead(running + waiting)} {'running' if running else 'waiting'}"


class Share:
    """Each visitor's share of each queue: `most` requests, running and waiting. Joins on their way
    into Gradio's queue are counted here, so that two sent at once cannot both pass."""

    def __init__(self, most: int = RUNNING_AND_WAITING):
        self.most = most
        self.joining_now: Counter[tuple[str, str]] = Counter()  # (queue, visitor) -> joins in flight

    def refusal(self, queue, concurrency_id: str, visitor: str) -> str | None:
        """The sentence refusing one more request of `visitor` in queue `concurrency_id`, or None."""
        running, waiting = _held(queue, concurrency_id, visitor)
        waiting += self.joining_now[(concurrency_id, visitor)]
        if running + waiting < self.most:
            return None
        name = NAMES.get(concurrency_id, "request")
        return (
            f"You have {_held_words(name, running, waiting)}; each visitor may have one {name} running and one "
            f"waiting, so that everyone gets a turn. Wait for one to finish (or stop it), then send this one again."
        )

    @contextmanager
    def joining(self, queue, concurrency_id: str, visitor: str):
        """Count a join of `visitor` while it reaches Gradio's queue; then order that queue fairly."""
        key = (concurrency_id, visitor)
        self.joining_now[key] += 1
        try:
            yield
        finally:
            self.joining_now[key] -= 1
            if self.joining_now[key] <= 0:
                del self.joining_now[key]
            fair(queue, concurrency_id)
            tidy(queue)


def tidy(queue) -> None:
    """Forget the sessions whose calls have all been answered: Gradio keeps each one's message
    queue and its empty set of event ids for good, and gradio_client opens a session per client."""
    for session, ids in list(queue.pending_event_ids_session.items()):
        if not ids:  # its stream closed when the last id went
            del queue.pending_event_ids_session[session]
            queue.pending_messages_per_session.pop(session, None)


GAVE_WAY = (
    "The queue was full, and your second waiting request gave its place to a visitor who had none; "
    "your other request keeps its place. Send this one again once that one has finished."
)


def make_place(queue, visitor: str) -> None:
    """Where Gradio's queue is full and `visitor` has no request waiting, the newest waiting request
    of the visitor with the most waiting (two or more) leaves the queue, its owner told so: a
    newcomer is never refused while another visitor holds two places."""
    waiting = [
        (event, waiting_list)
        for waiting_list in list(queue.event_queue_per_concurrency_id.values())
        for event in list(waiting_list.queue)
    ]
    if queue.max_size is None or len(waiting) < queue.max_size:
        return
    held = Counter(_owner(event) for event, _ in waiting)
    most, n = held.most_common(1)[0]
    if held[visitor] or n < 2:
        return
    event, waiting_list = next((e, w) for e, w in reversed(waiting) if _owner(e) == most)
    waiting_list.queue.remove(event)
    queue.event_ids_to_events.pop(event._id, None)
    queue.send_message(event, ProcessCompletedMessage(output={"error": GAVE_WAY}, success=False))


def tell(queue, session: str, sentence: str) -> str:
    """Give gradio_client's session `session` `sentence` as the error of a call that never queued
    (its AppError); the event id to answer its join with."""
    event_id = uuid.uuid4().hex
    queue.pending_event_ids_session.setdefault(session, set()).add(event_id)
    if session not in queue.pending_messages_per_session:
        queue.pending_messages_per_session[session] = asyncio.Queue()
    message = ProcessCompletedMessage(output={"error": sentence}, success=False, event_id=event_id)
    queue.pending_messages_per_session[session].put_nowait(message)
    return event_id
