"""The app served by a child process, for the benches that drive it over HTTP (`soak`, `heaviest`,
`uploads`): a free loopback port, a Gradio cache folder of its own, and the child stopped at the end.

    free_port   a loopback port no one listens on
    wait_up     wait until the child's Gradio answers (or it exits)
    served      with served(child, prefix, env) as (url, process, cache): the child started, up,
                and terminated on leaving (killed if it does not stop in 10 s)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from demo import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, server: subprocess.Popen, timeout: float = 900.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with status {server.returncode}")
        try:
            if httpx.get(url + "config", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server did not answer at {url} within {timeout:.0f} s")


@contextmanager
def served(
    child: Callable[[int], list[str]], prefix: str, env: Mapping[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """`python -m <child(port)>` serving on a free loopback port, with its own Gradio cache folder
    (a temporary one named `prefix`...), this environment plus `env`, and the repository on its
    path; yields (url, process, cache folder) once the app answers, and stops the child on leaving."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with tempfile.TemporaryDirectory(prefix=prefix) as cache:
        child_env = {**os.environ, "GRADIO_TEMP_DIR": cache, "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})}
        child_env.pop("GRADIO_SERVER_NAME", None)
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), child_env.get("PYTHONPATH")]))
        server = subprocess.Popen([sys.executable, "-m", *child(port)], env=child_env, cwd=ROOT)
        try:
            wait_up(url, server)
            yield url, server, Path(cache)
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
