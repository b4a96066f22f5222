"""The endpoints as MCP tools (Gradio's MCP server, `launch(mcp_server=True)`): an MCP client lists
exactly /trace and /exactness, each described by its docstring and with its parameters named, and
a /trace call through it returns the race's JSON, having passed the same guard and queue as any call."""

import asyncio
import base64
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from test_api_labels import app  # noqa: F401 (the app launched in-process, once for this file)

pytestmark = pytest.mark.slow
IMAGE = sorted((Path(__file__).resolve().parent.parent / "assets" / "world" / "examples").glob("*.png"))[0]


def _run(coroutine):
    """Runs the client on a thread of its own: a browser test earlier in this worker may have left
    an event loop running on the main thread, where asyncio.run refuses to start another."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _session(url: str, work):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        return await work(session)


def test_an_mcp_client_lists_trace_and_exactness_and_calls_trace(app):  # noqa: F811
    url = app.local_url + "gradio_api/mcp/"

    async def listed(session):
        return (await session.list_tools()).tools

    tools = {t.name: t for t in _run(_session(url, listed))}
    assert sorted(tools) == ["exactness", "trace"], sorted(tools)  # the page's /race and /analysis are not tools
    trace = tools["trace"]
    assert "accepted or\nrejected" in trace.description or "accepted or rejected" in trace.description
    assert {"image", "question", "preset", "drafter", "gamma", "max_new_tokens"} <= set(trace.inputSchema["properties"])
    assert "too few" in tools["exactness"].description

    image = "data:image/png;base64," + base64.b64encode(IMAGE.read_bytes()).decode()
    args = {"image": image, "question": "What colour is the shape?", "preset": "embedded", "drafter": "text-only"}
    args |= {"gamma": 4, "max_new_tokens": 8}  # greedy by default

    async def called(session):
        return await session.call_tool("trace", args)

    result = _run(_session(url, called))
    assert not result.isError, result.content
    text = result.content[0].text  # the JSON output, as Gradio's MCP server prints a dict
    assert "'speculative'" in text and "'drafter': 'text-only'" in text and "'accepted'" in text


def test_an_mcp_message_passes_the_guard_of_every_call(app):  # noqa: F811
    """The guard caps an MCP message as it caps a call's body: 413 with its sentence, before Gradio."""
    from demo.serve import guard

    answer = httpx.post(app.local_url + "gradio_api/mcp/", content=b" " * (guard.MAX_CALL_BODY + 1), timeout=30)
    assert answer.status_code == 413 and "MCP message may be at most 4 MiB" in answer.text
