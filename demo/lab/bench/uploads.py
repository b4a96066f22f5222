"""The upload flood, bounded: `python -m demo.lab.bench.uploads`.

The reproducer of the upload flood (random 9 MiB files sent to /gradio_api/upload from one client, as fast
as it answers), as a bounded loop to 127.0.0.1 only: it launches the app in a child process on a free
loopback port with its own Gradio cache folder (as `demo.lab.bench.soak` does), sends `--files` uploads
or stops after `--seconds`, and samples the upload folder's size every 0.1 s from a thread. It prints
what the server accepted and refused, the folder's peak size, and one JSON line.

    python -m demo.lab.bench.uploads                                   the deployment's defaults
    python -m demo.lab.bench.uploads --folder-mib 256 --rate-mib 100000   the folder cap alone at work
More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

from demo.lab.bench.child_server import served
from demo.lab.bench.soak import MIB

FILE_BYTES = 9 * MIB  # the reproducer's files: under the 10 MiB per-file limit


def folder_bytes(folder: Path) -> int:
    total = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.stat(os.path.join(parent, name)).st_size
            except OSError:  # deleted between the listing and the stat
                continue
    return total


def flood(url: str, folder: Path, files: int, seconds: float) -> dict:
    """Upload random FILE_BYTES files to `url` one after another (at most `files`, for at most
    `seconds`) while a thread samples `folder`'s size; returns the figures."""
    import httpx

    peak, done = [0], threading.Event()

    def sample():
        while not done.wait(0.1):
            peak[0] = max(peak[0], folder_bytes(folder))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    codes: dict[int, int] = {}
    accepted = 0
    started = time.perf_counter()
    with httpx.Client(timeout=60) as http:
        for i in range(files):
            if time.perf_counter() - started > seconds:
                break
            response = http.post(url + "gradio_api/upload", files={"files": (f"{i}.bin", os.urandom(FILE_BYTES))})
            codes[response.status_code] = codes.get(response.status_code, 0) + 1
            accepted += FILE_BYTES if response.status_code == 200 else 0
    took = time.perf_counter() - started
    time.sleep(1.0)  # Gradio moves the last upload into the folder after answering
    done.set()
    sampler.join()
    peak[0] = max(peak[0], folder_bytes(folder))
    return {
        "uploads": sum(codes.values()),
        "status_codes": {str(k): v for k, v in sorted(codes.items())},
        "accepted_mib": round(accepted / MIB, 1),
        "accepted_mib_per_s": round(accepted / MIB / took, 2),
        "seconds": round(took, 1),
        "folder_peak_mib": round(peak[0] / MIB, 1),
        "folder_end_mib": round(folder_bytes(folder) / MIB, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    from demo.serve import guard

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200, help="uploads at most")
    parser.add_argument("--seconds", type=float, default=60.0, help="stop sending after this long")
    parser.add_argument("--folder-mib", type=int, default=None, help="the server's DEMO_UPLOAD_FOLDER_MIB")
    parser.add_argument("--rate-mib", type=int, default=None, help="the server's DEMO_UPLOAD_MIB_PER_MINUTE")
    args = parser.parse_args(argv)
    limits = ((guard.UPLOAD_FOLDER_ENV, args.folder_mib), (guard.UPLOAD_RATE_ENV, args.rate_mib))
    env = {name: str(value) for name, value in limits if value is not None}  # the server's caps, where given
    with served(lambda port: ["demo.lab.bench.soak", "--serve", str(port)], "uploads-cache-", env) as (url, _, cache):
        base = folder_bytes(cache)
        result = flood(url, cache, args.files, args.seconds)
    caps = {
        "folder_cap_mib": args.folder_mib or guard.UPLOAD_FOLDER_MIB,
        "rate_mib_per_minute": args.rate_mib or guard.UPLOAD_MIB_PER_MINUTE,
        "folder_at_start_mib": round(base / MIB, 1),
    }
    result = caps | result
    print(
        f"{result['uploads']} uploads of 9 MiB in {result['seconds']} s: {result['status_codes']}; accepted "
        f"{result['accepted_mib']} MiB ({result['accepted_mib_per_s']} MiB/s); upload folder peak "
        f"{result['folder_peak_mib']} MiB (cap {caps['folder_cap_mib']} MiB)"
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
