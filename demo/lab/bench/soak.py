"""Soak benchmark: does the server's memory stay flat over many requests? `python -m demo.lab.bench.soak`.

Launches the app in a child process on a free loopback port and drives it through gradio_client,
one request after another (each from a new visitor; `--one-session`: all from one), cycling
through the world's examples and MIX (a chain, a tree, a two-lane and a sampled race, an analysis
and a law check). It prints the server's RSS after the warm-up and every `--every` requests, its
Gradio cache's files and CPU seconds per request, and one JSON line; `--tracemalloc N` shows what
grows. The growth figure is RSS at the end minus RSS after the warm-up.

    python -m demo.lab.bench.soak --requests 1000 --warmup 30  the figure docs/soak.md quotes (last 500)
    python -m demo.lab.bench.soak --requests 60 --every 20     a quick look
    python -m demo.lab.bench.soak --tracemalloc 20             what grows, by line, between readings
    python -m demo.lab.bench.soak --mix chain --one-session    the soak as it was before the mix
    python -m demo.lab.bench.soak --requests 12 --warmup 3 --every 12 --mix chain --one-session
                                                           a race's server CPU, quickly

"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from demo.lab.bench.child_server import served
from demo.models import presets
from demo.session import form

EXAMPLES = presets.ASSETS / "examples"
MIB = 2**20


def client(url: str, **kwargs):
    """A gradio_client Client for `url` that waits up to 300 s for every HTTP answer.

    gradio_client posts uploads with httpx's default 5 s timeout: a server busy with races on a
    2-core machine can take longer than that to accept a file, which is a wait, not a failure.
    """
    from gradio_client import Client

    return Client(url, verbose=False, httpx_kwargs={"timeout": 300}, **kwargs)


def rss_bytes(pid: int | str = "self") -> int:
    """Resident set size of process `pid`, from /proc/<pid>/status (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds process `pid` has used, from /proc/<pid>/stat (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_files(folder: str | Path) -> int:
    return sum(len(files) for _, _, files in os.walk(folder))


def examples(folder: Path = EXAMPLES) -> list[tuple[str, str]]:
    """(image path, question) pairs of the embedded world's examples."""
    rows = json.loads((folder / "examples.json").read_text())
    return [(str(folder / r["image"]), r["question"]) for r in rows]


def race_arguments(image: str, question: str, preset: str, drafter: str, max_new_tokens: int, **change) -> dict:
    """/race's arguments by name: greedy, gamma 4, the page's other defaults, then `change`."""
    from gradio_client import handle_file

    return {
        "image": handle_file(image),
        "question": question,
        "preset": preset,
        "drafter": drafter,
        "gamma": 4,
        "greedy": True,
        "temperature": 0.8,
        "top_p": 0.95,
        "seed": 0,
        "max_new_tokens": max_new_tokens,
        "min_confidence": 0.5,
        "adaptive": False,  # the page's Adaptive box: off, so min_confidence is not applied
    } | change


# The requests a soak cycles through, by kind: each a change to /race's arguments, or one of the
# calls by name in CALLS: an analysis (each example's image ablation included), the proof section's
# law check of one prompt (/exactness).
# The drafters are the embedded preset's (and the tiny test presets'): text-only and image-aware.
KINDS = {
    "chain": {},
    "tree": {"drafter": "text-only+tree"},
    "two-lane": {"second_drafter": "image-aware"},
    "sampled": {"greedy": False, "temperature": 1.0, "seed": 7},
    "analysis": None,
    "exactness": None,
}
MIX = ("chain", "tree", "two-lane", "sampled", "chain", "tree", "two-lane", "sampled", "chain", "analysis")
MIX += ("exactness",)
ANALYSIS = {"task": "caption", "drafter": "text-only", "gamma": 4, "n": 2, "seed": 0, "language": "en"}
K = 2  # /exactness: the tokens after the first whose law is checked


def request(client, kind: str, i: int, pairs, preset: str, drafter: str, max_new_tokens: int) -> None:
    """Send request number `i` of kind `kind` (a key of KINDS) and wait for its result."""
    image, question = pairs[i % len(pairs)]
    if kind == "analysis":
        client.predict(preset, *ANALYSIS.values(), api_name="/analysis")
        return
    if kind == "exactness":  # /trace's fields by name, then k
        race = race_arguments(image, question, preset, drafter, max_new_tokens, greedy=False, seed=i)
        client.predict(race["image"], **form.fields(race), k=K, api_name="/exactness")
        return
    change = {"drafter": drafter} | KINDS[kind]
    client.predict(**race_arguments(image, question, preset, max_new_tokens=max_new_tokens, **change), api_name="/race")


def soak(
    url: str,
    rss: Callable[[], int],
    cache: Path | None,
    *,
    requests: int,
    warmup: int,
    every: int,
    preset: str,
    drafter: str,
    max_new_tokens: int,
    pairs: list[tuple[str, str]],
    mix: tuple[str, ...] = MIX,
    one_session: bool = False,
    report: Callable[[str], None] = print,
    cpu: Callable[[], float] | None = None,
    snapshot: Callable[[], None] | None = None,
) -> dict:
    """Drive `requests` requests (after `warmup` more) against the app at `url`, cycling through
    `mix` (keys of KINDS), each from a new session unless `one_session`; returns the figures.

    rss() reads the server's RSS in bytes, cpu() its CPU seconds (None: not read); cache is its
    Gradio cache folder (None: not counted); snapshot() is called at each reading (None: not).
    """
    visitor = client(url)
    files = (lambda: count_files(cache)) if cache is not None else (lambda: None)
    cpu = cpu or (lambda: float("nan"))

    def one(i: int) -> None:
        if not one_session:
            visitor.reset_session()  # a new visitor
        request(visitor, mix[i % len(mix)], i, pairs, preset, drafter, max_new_tokens)

    for i in range(warmup):
        one(i)
    base = rss()
    if snapshot:
        snapshot()
    samples = [{"requests": 0, "rss_mib": round(base / MIB, 1), "cache_files": files()}]
    report(f"{'requests':>8} {'RSS MiB':>9} {'growth MiB':>11} {'cache files':>12} {'s/req':>7} {'CPU s/req':>10}")
    report(f"{0:>8} {base / MIB:>9.1f} {0.0:>11.1f} {samples[0]['cache_files'] or 0:>12}")
    started = last = time.perf_counter()
    first_cpu = last_cpu = cpu()
    for i in range(1, requests + 1):
        one(warmup + i)
        if i % every == 0 or i == requests:
            now, r, used = time.perf_counter(), rss(), cpu()
            if snapshot:
                snapshot()
            done = i - samples[-1]["requests"]
            per, cpu_per = (now - last) / done, (used - last_cpu) / done
            samples.append({"requests": i, "rss_mib": round(r / MIB, 1), "cache_files": files()})
            report(
                f"{i:>8} {r / MIB:>9.1f} {(r - base) / MIB:>11.1f} {samples[-1]['cache_files'] or 0:>12} {per:>7.2f}"
                f" {cpu_per:>10.2f}"
            )
            last, last_cpu = now, used
    end = rss()
    visitor.close()
    half = next(s for s in samples if s["requests"] >= requests // 2)  # the figure: the last half
    return {
        "requests": requests,
        "warmup": warmup,
        "preset": preset,
        "drafter": drafter,
        "max_new_tokens": max_new_tokens,
        "mix": list(mix),
        "one_session": one_session,
        "rss_after_warmup_mib": round(base / MIB, 1),
        "rss_end_mib": round(end / MIB, 1),
        "growth_mib": round((end - base) / MIB, 1),
        "growth_per_request_kib": round((end - base) / requests / 1024, 1),
        "last_half_kib_per_request": round(
            (end - half["rss_mib"] * MIB) / max(1, requests - half["requests"]) / 1024, 1
        ),
        "cache_files": files(),
        "seconds": round(time.perf_counter() - started, 1),
        "server_cpu_s_per_request": round((cpu() - first_cpu) / requests, 3),
        "samples": samples,
    }


TRACE_ENV = "DEMO_SOAK_TRACE"  # the child: trace allocations, and dump a snapshot to $DEMO_SOAK_TRACE.N on SIGUSR1


def _trace(prefix: str, frames: int) -> None:
    """Trace the child's allocations (`frames` deep); each SIGUSR1 dumps a snapshot to prefix.N."""
    import signal
    import tracemalloc

    tracemalloc.start(frames)
    dumped = []

    def dump(*_):
        tracemalloc.take_snapshot().dump(f"{prefix}.{len(dumped)}")
        dumped.append(True)
        Path(f"{prefix}.done").write_text(str(len(dumped)))

    signal.signal(signal.SIGUSR1, dump)


def grown(prefix: str, first: int, last: int, top: int) -> list[str]:
    """The `top` lines (their tracebacks' innermost frames in the app or a library) whose memory grew
    most between snapshots `first` and `last`."""
    import tracemalloc

    keep = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
    ]
    old, new = (tracemalloc.Snapshot.load(f"{prefix}.{n}").filter_traces(keep) for n in (first, last))
    return [str(stat) for stat in new.compare_to(old, "lineno")[:top]]


def _snapshot(server, prefix: str) -> None:
    """Ask the child for a snapshot, and wait until it is written."""
    import signal

    done = Path(f"{prefix}.done")
    before = done.read_text() if done.exists() else "0"
    server.send_signal(signal.SIGUSR1)
    while not done.exists() or done.read_text() == before:
        time.sleep(0.2)


def _serve(port: int) -> None:
    """The child process: the app on 127.0.0.1:port, as `launch()` serves it, without the warm-up."""
    from demo.page import server

    if os.environ.get(TRACE_ENV):
        _trace(os.environ[TRACE_ENV], int(os.environ.get(TRACE_ENV + "_FRAMES", "1")))

    server.launch(server.build_demo(), warm=None, server_name="127.0.0.1", server_port=port, quiet=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="requests measured after the warm-up")
    parser.add_argument("--warmup", type=int, default=30, help="requests before the baseline RSS is read")
    parser.add_argument("--every", type=int, default=100, help="print RSS every this many requests")
    parser.add_argument("--preset", default=presets.DEFAULT_PRESET)
    parser.add_argument("--drafter", default=None, help="default: the preset's first")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--mix", default=",".join(MIX), help=f"request kinds to cycle through, of {', '.join(KINDS)}")
    parser.add_argument("--one-session", action="store_true", help="every request from one Gradio session")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="N", help="print the N lines that grew most")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    unknown = set(args.mix.split(",")) - set(KINDS)
    if unknown:
        parser.error(f"unknown request kinds {', '.join(sorted(unknown))}; the kinds are {', '.join(KINDS)}")
    if args.serve is not None:
        _serve(args.serve)
        return {}
    drafter = args.drafter or presets.PRESETS[args.preset].drafters[0].name
    # One client sends every request's image: the files a visitor may upload a minute are not
    # what a soak measures (its requests come faster than a person's)
    env = {"DEMO_UPLOAD_FILES_PER_MINUTE": os.environ.get("DEMO_UPLOAD_FILES_PER_MINUTE", "1000000")}
    trace = tempfile.mkdtemp(prefix="soak-trace-") + "/snapshot" if args.tracemalloc else None
    if trace:
        env[TRACE_ENV] = trace
    with served(lambda port: ["demo.lab.bench.soak", "--serve", str(port)], "soak-cache-", env) as (url, server, cache):
        print(f"server pid {server.pid} at {url}; cache {cache}; {args.warmup} warm-up races")
        snapshot = (lambda: _snapshot(server, trace)) if trace else None
        result = soak(
            url,
            lambda: rss_bytes(server.pid),
            cache,
            cpu=lambda: cpu_seconds(server.pid),
            requests=args.requests,
            warmup=args.warmup,
            every=args.every,
            preset=args.preset,
            drafter=drafter,
            max_new_tokens=args.max_new_tokens,
            pairs=examples(),
            mix=tuple(args.mix.split(",")),
            one_session=args.one_session,
            snapshot=snapshot,
        )
    if trace:
        readings = len(result["samples"])
        print(f"grew most between the last two readings ({trace}.{readings - 2} -> .{readings - 1}):")
        print("\n".join(grown(trace, readings - 2, readings - 1, args.tracemalloc)))
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
    return result


if __name__ == "__main__":
    main()
