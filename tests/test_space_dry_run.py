"""The Space's first minute with DEMO_PRELOAD=llava-1.5-7b, on the preset's real tokenizers.

`python app.py` starts as a Space starts after `preload_from_hub`: its repos in the Hugging Face
cache (HF_HUB_CACHE, here written by tests/real_tokenizers.py: the real LLaMA vocabulary, <image>
and <pad>, llava-hf's chat template, tiny random weights with 32,064 and 32,000 rows) and the hub
off (HF_HUB_OFFLINE=1). No setting of the demo's own is needed. The app must preload the preset,
offer it in the selector, answer /trace, and show the answer's tokens whole, at phone width too.
"""

import glob
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import real_tokenizers as real
from gradio_client import handle_file

from demo.lab.bench import page as page_bench
from demo.lab.bench import soak
from demo.lab.bench.page import DRAWN

pytestmark = pytest.mark.slow  # a server and a browser: the full suite only

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(os.environ.get("SCREENSHOT_DIR", ROOT / "runs" / "screenshots"))
PRESET, DRAFTER = real.PRESET["llava"], real.DRAFTER["llava"]
IMAGE = sorted(glob.glob(str(ROOT / "assets" / "world" / "examples" / "*.png")))[0]


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    """`python app.py` as a Space runs it; yields (url, path of its log)."""
    try:
        cache = real.build_cache(tmp_path_factory.mktemp("hub"), ("llava",))
    except real.NotFetched as error:
        pytest.fail(str(error))
    log = tmp_path_factory.mktemp("space") / "app.log"
    port = page_bench.free_port()
    env = {
        **os.environ,
        "DEMO_PRELOAD": PRESET,
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_SERVER_PORT": str(port),
    }
    with open(log, "w") as out:
        app = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.perf_counter() + 240
        while "Running on local URL" not in log.read_text():
            assert app.poll() is None, f"app.py exited with {app.returncode}:\n{log.read_text()[-3000:]}"
            assert time.perf_counter() < deadline, f"no server after 240 s:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield url, log
    finally:
        app.terminate()
        app.wait()


def test_the_app_starts_having_preloaded_the_preset_from_the_cache(space):
    _, log = space
    text = log.read_text()
    assert f"preloaded preset '{PRESET}' on cpu" in text
    assert "Traceback" not in text and "failed" not in text


def test_trace_answers_with_whole_tokens(space):
    url, _ = space
    client = soak.client(url)
    args = (handle_file(IMAGE), "What is shown in this image? é 😀 中文", PRESET, DRAFTER, 4, True, 0.8, 0.95, 0, 24)
    result = client.predict(*args, api_name="/trace")
    spd, ar = result["runs"]["speculative"]["trace"], result["runs"]["autoregressive"]["trace"]
    assert result["settings"]["preset"] == PRESET and result["settings"]["drafter"] == DRAFTER
    assert spd["summary"]["token_ids"] == ar["summary"]["token_ids"] and result["comparison"]["identical"] is True
    assert len(spd["summary"]["token_ids"]) == 24 and max(spd["summary"]["token_ids"]) < 32_064
    pieces = [t["text"] for t in spd["tokens"]]
    assert "".join(pieces) == spd["summary"]["text"] and "\ufffd" not in spd["summary"]["text"]
    assert sum(len(r["drafted_ids"]) for r in spd["rounds"]) > 0  # the Vicuna drafter drafted


def test_the_page_offers_the_preset_and_shows_its_tokens_at_phone_width(space, chromium):
    url, _ = space  # the worker's one Chromium (tests/browser_app.py): a second Playwright in one process fails
    page = chromium.new_page(viewport={"width": 420, "height": 900})
    try:
        page.goto(url)
        page.wait_for_selector(DRAWN, timeout=60_000)
        assert page.input_value("#preset input") == PRESET
        page.click("#preset input")
        options = [o.split("\n")[-1].strip() for o in page.get_by_role("option").all_inner_texts()]  # "✓\nname"
        assert options == [PRESET]  # preloaded: exactly what loaded at start-up
        page.keyboard.press("Escape")
        assert page.input_value("#drafter input") == DRAFTER
        page.locator("#examples .thumbnail-item").first.click()  # the first example, 16 tokens
        page.wait_for_function("document.querySelector('#question textarea').value.length > 0")
        page.wait_for_selector("#image img")
        page.fill("#max-new input[type=number]", "16")
        page.press("#max-new input[type=number]", "Enter")
        page.click("#run")
        page.wait_for_selector("#outcome .badge", timeout=300_000)
        page.wait_for_selector("#run:not([disabled])", timeout=60_000)
        texts = page.locator("#spd-panel .tok").all_inner_texts()
        assert len(texts) > 1 and all(t and "\ufffd" not in t for t in texts)
        assert page.locator("#ar-panel .tok").all_inner_texts() == texts  # greedy: the same tokens
        assert "lossless ✓ identical outputs" in page.inner_text("#outcome")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 420  # nothing runs off a phone's screen
        page.wait_for_timeout(400)  # the last plotly redraw, before the screenshot
    finally:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "llava-preset-phone.png"), full_page=True)  # on a failure too
        page.close()
