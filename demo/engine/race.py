"""Race two event streams on one machine, each on its own compute clock.

Running both decoders at once would make them share the CPU (or GPU) and slow each other
unpredictably. Instead they take turns on one thread: at every step the run that has used
less compute so far advances by one event. Each run's clock (`event.t`) stops while the other
runs, so the interleaving shown is the race that was measured: a token appears in a lane at
the moment, on that run's own clock, it was produced.
"""

from __future__ import annotations

from collections.abc import Iterator

from demo.engine.events import Event


def race(lanes: dict[str, Iterator[Event]]) -> Iterator[tuple[str, Event]]:
    """Yield (lane name, event) pairs, always advancing the lane whose clock is behind (ties: the
    lane listed first); a lane that ends drops out."""
    clocks = {name: 0.0 for name in lanes}
    live = dict(lanes)
    while live:
        name = min(live, key=lambda n: clocks[n])
        event = next(live[name], None)
        if event is None:
            del live[name]
            continue
        clocks[name] = event.t
        yield name, event
