"""The API a caller reads: every endpoint's outputs have names, never value_42 (docs/api.md);
and nothing else is served openly: Gradio's /monitoring summary is off."""

import httpx
import pytest

from demo.lab.bench import soak
from demo.page import server


@pytest.fixture(scope="module")
def app():
    demo = server.build_demo()
    server.launch(demo, warm=None, prevent_thread_lock=True, quiet=True)
    yield demo
    demo.close()


def test_monitoring_is_off(app):
    assert httpx.get(app.local_url + "monitoring", timeout=10).status_code in (403, 404)
    assert httpx.get(app.local_url + "monitoring/summary", timeout=10).status_code in (403, 404)


def test_every_endpoint_names_its_outputs(app):
    info = soak.client(app.local_url).view_api(return_format="dict", print_info=False)
    endpoints = info["named_endpoints"]
    assert sorted(endpoints) == ["/analysis", "/exactness", "/race", "/trace"]
    assert [r["label"] for r in endpoints["/exactness"]["returns"]] == ["law check", "law chart", "law"]
    assert [r["label"] for r in endpoints["/race"]["returns"]] == [
        "speculative panel",
        "speculative stats",
        "autoregressive panel",
        "autoregressive stats",
        "outcome",
        "block view",
        "race chart",
        "block efficiency chart",
        "accept lengths chart",
        "acceptance by position chart",
        "Download the trace (JSON)",
        "Download the tokens (CSV)",
        "annotated round",
        "time per round chart",
        "gamma sweep chart",
        "gamma sweep note",
        "second speculative panel",
        "second speculative stats",
        "second block view",
        "table of drafting strategies",
    ]
    assert [r["label"] for r in endpoints["/trace"]["returns"]] == ["trace"]
    assert [r["label"] for r in endpoints["/analysis"]["returns"]][:4] == [
        "status",
        "headline",
        "rejection by category chart",
        "rejection by position chart",
    ]
    for endpoint in endpoints.values():
        for returned in endpoint["returns"]:
            assert not returned["label"].startswith("value_"), returned
