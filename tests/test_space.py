"""The Hugging Face Space: what `demo.deploy.space stage` writes, that the staged folder serves and races
the embedded models (a real `python app.py`, driven by gradio_client), the push's refusals
without a hub, the LFS rules, the card's links, and preloading (a Space, or DEMO_PRELOAD)."""

import importlib
import io
import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
import time
import types
import urllib.request
from pathlib import Path

import gradio.utils
import pytest
import races
import tiny
import torch
from gradio_client import handle_file

from demo import session
from demo.deploy import space
from demo.engine.sampling import Sampling
from demo.lab.bench import soak
from demo.models import drafter_loaders, loader, preloading, presets, zerogpu
from demo.page import layout, server
from demo.page.analysis import tab as analysis_tab
from demo.session import offers

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED = Path(presets.PRESETS["embedded"].target).exists()
NO_HUB = {"HF_HUB_OFFLINE": "1", "HF_HOME": "/nonexistent-hf-home"}


def run_space(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "demo.deploy.space", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


# --- staging ------------------------------------------------------------------------------------


def test_stage_writes_exactly_the_space_files(tmp_path):
    folder = tmp_path / "space"
    files = {str(f) for f in space.stage(folder)}
    copied = set(space.source_files())
    assert files == copied | {"README.md", "requirements.txt"}
    assert {
        "app.py",
        ".gitattributes",
        "assets/world/target/model.safetensors",
        "demo/deploy/space.py",
    } <= files
    assert not any(f.startswith(("tests/", "runs/", ".git/", ".ci/", "demo/lab/")) or "__pycache__" in f for f in files)
    for name in copied:  # copied as they are
        assert (folder / name).stat().st_size == (ROOT / name).stat().st_size, name
    requirements = (folder / "requirements.txt").read_text().splitlines()
    assert f"torch=={space.TORCH_FOR_SPACE}" in requirements and "torch==2.13.0" not in requirements
    local = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
    assert [r for r in requirements if not r.startswith(("#", "torch=="))] == [
        r for r in local if not r.startswith("torch==")
    ]
    card = (folder / "README.md").read_text()
    assert card == (ROOT / "README.md").read_text()  # embedded only: no hub repos to list
    assert 'python_version: "3.12"' in card and "suggested_hardware: zero-a10g" in card


def test_stage_lists_the_hub_presets_repos_for_the_build_to_download(tmp_path):
    space.stage(tmp_path / "space", ("embedded", "smolvlm-500m"))
    head = (tmp_path / "space" / "README.md").read_text().split("\n---\n")[0]
    repos = [
        "HuggingFaceTB/SmolVLM-500M-Instruct",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
    ]
    assert head.endswith(
        "\n".join(
            [
                "models:",
                *(f"  - {r}" for r in repos),
                "preload_from_hub:",
                *(f"  - {r}" for r in repos),
            ]
        )
    )


def test_stage_refuses_a_folder_that_is_not_empty_unless_forced(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    refused = run_space("stage", str(tmp_path))
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"{tmp_path} is not empty; stage into an empty or new folder, or pass --force to replace it."
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"]
    forced = run_space("stage", str(tmp_path), "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (tmp_path / "old.txt").exists() and (tmp_path / "app.py").is_file()


def test_dry_run_lists_every_file_with_its_size_and_contacts_nobody():
    result = run_space("push", "someone/spd", "--dry-run", env=NO_HUB)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "Would upload to spaces/someone/spd (DEMO_PRELOAD=embedded):"
    rows = {line.split()[-1]: line.split() for line in lines[1:-1]}
    target = "assets/world/target/model.safetensors"
    assert rows[target][:2] == [f"{(ROOT / target).stat().st_size:,}", "LFS"]
    assert rows["app.py"][1] == "git" and "tests/test_space.py" not in rows
    assert lines[-1].split()[1:] == ["bytes", "in", str(len(rows)), "files"]


@pytest.mark.parametrize(
    "env, sentence",
    [
        (
            {"HF_TOKEN": "", "HF_HOME": "/nonexistent-hf-home"},
            "No Hugging Face token: run `hf auth login` or set HF_TOKEN, then push again; nothing was uploaded.",
        ),
        (
            {"HF_TOKEN": "hf_test", "HF_HUB_OFFLINE": "1"},
            "The Hugging Face hub is off on this machine (HF_HUB_OFFLINE=1); nothing was uploaded.",
        ),
        (  # nothing listens on port 9 of loopback: the connection is refused at once
            {"HF_TOKEN": "hf_test", "HF_ENDPOINT": "http://127.0.0.1:9"},
            (
                "The Hugging Face hub cannot be reached (ConnectError: [Errno 111] Connection refused); "
                "nothing was uploaded."
            ),
        ),
    ],
    ids=["no-token", "offline", "no-network"],
)
def test_push_without_a_token_or_a_network_says_which_in_one_sentence(env, sentence):
    result = run_space("push", "someone/spd", env=env)
    assert result.returncode == 1
    assert result.stderr.strip() == sentence and result.stdout == ""


def test_every_tracked_file_over_10_mib_goes_through_lfs():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    large = [
        f
        for f in tracked.stdout.split("\0")
        if f and (ROOT / f).is_file() and (ROOT / f).stat().st_size > space.LFS_LIMIT
    ]
    assert "assets/world/target/model.safetensors" in large
    attrs = subprocess.run(
        ["git", "check-attr", "filter", "--", *large],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert attrs.stdout.splitlines() == [f"{f}: filter: lfs" for f in large]


def _slug(heading: str) -> str:  # GitHub's and the hub's anchors
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_in_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.name}: {target}"
            if anchor:
                headings = [_slug(h) for h in re.findall(r"^#+ (.+)$", file.read_text(), flags=re.MULTILINE)]
                assert anchor in headings, f"{page.name}: {target}"
            checked += 1
    assert checked >= 8


def test_readme_is_a_card_of_at_most_250_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


# --- the staged Space, served for real ----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(not EMBEDDED, reason="the embedded models are not trained yet")
def test_the_staged_space_serves_the_page_and_races_the_embedded_models(tmp_path):
    folder = tmp_path / "space"
    space.stage(folder)
    port = _free_port()
    log = tmp_path / "app.log"
    env = {
        **os.environ,
        "GRADIO_SERVER_PORT": str(port),
        "SPACE_ID": "someone/spd",
        **NO_HUB,
    }
    env.pop("PYTHONPATH", None)
    env.pop(zerogpu.PRELOAD_ENV, None)
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "app.py"],
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline, page = time.monotonic() + 180, None
        while page is None and time.monotonic() < deadline and server.poll() is None:
            try:
                page = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                time.sleep(0.5)
        assert page is not None, log.read_text()[-3000:]
        assert "<html" in page
        config = json.loads(urllib.request.urlopen(url + "config", timeout=10).read())
        assert config["title"] == "Speculative decoding, live"
        selector = next(c for c in config["components"] if c["props"].get("elem_id") == "preset")
        assert [choice[0] for choice in selector["props"]["choices"]] == ["embedded"]  # the one it serves
        text = log.read_text()
        assert text.index("preloaded preset 'embedded'") < text.index(url.rstrip("/"))  # loaded before serving
        example = next((folder / "assets" / "world" / "examples").glob("*.png"))
        client = soak.client(url)
        result = client.predict(
            handle_file(str(example)),
            "Describe the image.",
            "embedded",
            "image-aware",
            4,
            True,
            0.8,
            0.95,
            0,
            32,
            api_name="/trace",
        )
        spd, ar = (
            result["runs"]["speculative"]["trace"],
            result["runs"]["autoregressive"]["trace"],
        )
        assert result["comparison"]["identical"] is True and spd["summary"]["text"] == ar["summary"]["text"]
        assert len(spd["summary"]["token_ids"]) > 0
    finally:
        server.terminate()
        server.wait(30)


# --- preloading ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("space-presets")
    tiny.save_preset(root / "a", "tiny-a")
    tiny.save_preset(root / "b", "tiny-b")
    yield root
    for name in ("tiny-a", "tiny-b"):
        loader.PRESETS.pop(name, None)
        loader._LOADED.pop(name, None)


@pytest.fixture
def no_loading(monkeypatch):
    """Any model load from here on fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(drafter_loaders, "load_model", refuse)  # every model, target or drafter, loads here


def test_preload_names_follow_the_space_and_the_variable(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv(zerogpu.PRELOAD_ENV, raising=False)
    assert zerogpu.preload_names("embedded") is None  # off a Space: lazy
    monkeypatch.setenv("SPACE_ID", "someone/spd")
    assert zerogpu.preload_names("embedded") == ("embedded",)
    monkeypatch.setenv(zerogpu.PRELOAD_ENV, " smolvlm-500m, embedded,smolvlm-500m ")
    assert zerogpu.preload_names("embedded") == ("smolvlm-500m", "embedded")
    monkeypatch.setenv(zerogpu.PRELOAD_ENV, "")
    assert zerogpu.preload_names("embedded") is None


def test_the_duration_asked_for_grows_with_the_request_and_is_capped(monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")  # the work budget's estimate (demo.session.budget.race)
    request = races.embedded(question="Describe.", sampling=Sampling(greedy=False), max_new_tokens=128)
    assert session._race_duration(request, None) == 24  # 491 target steps at the preset's 0.05 s a step
    greedy = races.embedded(question="Describe.", max_new_tokens=128)
    # and the γ sweep's 10 x 0.15 x 128 steps, and the table of strategies' 3.24 x 128 (17 strategies)
    assert session._race_duration(greedy, None) == 50
    longer = races.embedded(question="Describe.", gamma=10, max_new_tokens=512)
    assert session._race_duration(longer, None) == zerogpu.MAX_DURATION


def test_with_demo_preload_the_presets_load_before_the_first_request_and_a_race_loads_nothing(
    monkeypatch, two_tiny, request
):
    monkeypatch.setattr(preloading, "_PRELOADED", None)
    monkeypatch.setenv(zerogpu.PRELOAD_ENV, "tiny-a")
    monkeypatch.delitem(sys.modules, "app", raising=False)
    app = importlib.import_module("app")  # module scope: preloads, then builds the page
    assert loader.is_loaded("tiny-a") and set(loader._LOADED["tiny-a"].drafters) == {
        "text-only",
        "image-aware",
    }
    assert preloading.preloaded() == {"tiny-a": None}
    selector = next(c for c in app.demo.config["components"] if c["props"].get("elem_id") == "preset")
    assert [choice[0] for choice in selector["props"]["choices"]] == ["tiny-a"] and selector["props"][
        "value"
    ] == "tiny-a"
    request.getfixturevalue("no_loading")  # from here on, a load fails the test
    server.launch(app.demo, warm=None, prevent_thread_lock=True, quiet=True)
    try:
        image = tiny.images(1)[0]
        path = two_tiny / "q.png"
        image.save(path)
        client = soak.client(app.demo.local_url)
        result = client.predict(
            handle_file(str(path)),
            "Describe the image.",
            "tiny-a",
            "text-only",
            3,
            True,
            0.8,
            0.95,
            0,
            12,
            api_name="/trace",
        )
        assert result["comparison"]["identical"] is True
    finally:
        app.demo.close()
        sys.modules.pop("app", None)


def test_a_decorated_handler_asked_for_an_unloaded_preset_refuses_without_loading(monkeypatch, two_tiny, no_loading):
    monkeypatch.setattr(preloading, "_PRELOADED", {"tiny-a": None})
    request = races.request(preset="tiny-b", drafter="text-only", gamma=4, max_new_tokens=8)
    with pytest.raises(loader.Unavailable) as refused:
        next(session.gpu_race(request, None, gradio.utils.get_upload_folder()))
    assert str(refused.value) == (
        "This deployment does not serve preset 'tiny-b': it was not loaded at start-up. It serves: tiny-a."
    )
    items = analysis_tab.examples_for("caption", 1, seed=0)
    with pytest.raises(loader.Unavailable, match="^This deployment does not serve preset 'tiny-b'"):
        next(session.decode_examples("tiny-b", ["text-only"], items, 4, 8))
    assert not loader.is_loaded("tiny-b")


class _PlainOnly(pickle.Pickler):
    """Pickles like ZeroGPU does, but refuses what must not cross its process boundary."""

    def reducer_override(self, obj):
        if isinstance(obj, (torch.Tensor, torch.nn.Module, torch.Generator, types.GeneratorType)):
            raise AssertionError(f"a decorated function yielded {type(obj).__name__}")
        return NotImplemented


def _plain(item) -> bool:
    _PlainOnly(io.BytesIO()).dump(item)
    return True


def test_decorated_functions_yield_plain_data_only(monkeypatch, two_tiny):
    monkeypatch.setattr(preloading, "_PRELOADED", None)
    upload = Path(gradio.utils.get_upload_folder()) / "test-space"
    upload.mkdir(parents=True, exist_ok=True)
    tiny.images(1)[0].save(upload / "q.png")
    request = races.request(preset="tiny-a", drafter="image-aware", max_new_tokens=10)
    try:
        payload = {"path": str(upload / "q.png"), "meta": {"_type": "gradio.FileData"}}
        items = list(session.gpu_race(request, payload, gradio.utils.get_upload_folder()))
    finally:
        shutil.rmtree(upload)
    kinds = [type(item).__name__ for item in items]
    raced = items[kinds.index("Ready") + 1 : kinds.index("Sweeping")]
    assert raced and {type(item) for item in raced} == {session.Lane} and {i.name for i in raced} == set(session.LANES)
    # the sweep, in the same call: a Sweeping per draft length (a Stop may end it between them), then one per
    # strategy of the table, at the race's γ, then Swept
    sweeping = [(item.gamma, item.strategy) for item in items[len(raced) + kinds.index("Ready") + 1 : -1]]
    offered = loader.PRESETS["tiny-a"].drafter_names()
    assert sweeping == [(g, None) for g in range(1, 11)] + [(3, name) for name in offered]
    assert isinstance(items[-1], session.Swept) and [r["gamma"] for r in items[-1].rows] == list(range(1, 11))
    assert [r["strategy"] for r in items[-1].strategies] == list(offered)
    assert all(_plain(item) for item in items)
    steps = list(session.decode_examples("tiny-a", ["text-only"], analysis_tab.examples_for("vqa", 2, 0), 3, 8))
    assert [type(s).__name__ for s in steps] == ["Running", "Decoded", "Running", "Decoded"]
    assert all(_plain(step) for step in steps)


def test_a_preset_that_fails_to_preload_is_named_with_the_reason_and_the_others_are_served(
    monkeypatch, two_tiny, tmp_path
):
    monkeypatch.setattr(preloading, "_PRELOADED", None)
    monkeypatch.setenv(zerogpu.PRELOAD_ENV, "tiny-a,broken,nonesuch")
    monkeypatch.setitem(
        loader.PRESETS,
        "broken",
        loader.Preset(
            "broken",
            str(tmp_path / "gone"),
            (loader.DrafterSpec("d", "text-only", "x"),),
        ),
    )
    outcome = preloading.preload(("tiny-a", "broken", "nonesuch"))
    assert outcome == {
        "tiny-a": None,
        "broken": f"Model files missing: {tmp_path / 'gone'}",
        "nonesuch": f"unknown preset 'nonesuch' (known: {', '.join(loader.PRESETS)})",
    }
    choices, left = offers.offered("embedded")
    assert choices == ["tiny-a"]
    assert left["broken"] == f"it failed to load at start-up: Model files missing: {tmp_path / 'gone'}."
    assert left["embedded"] == "not loaded at start-up here (set DEMO_PRELOAD to serve it)."
    assert "<b>broken</b>: it failed to load at start-up: Model files missing" in layout.left_out_html(left)
    with pytest.raises(
        loader.Unavailable,
        match=r"it failed to load at start-up \(Model files missing: .*\)\. It serves: tiny-a\.$",
    ):
        preloading.check_served("broken")
    preloading.check_served("tiny-a")  # served: no refusal


def test_off_a_space_the_selector_offers_the_presets_whose_files_are_here_and_names_the_rest(
    monkeypatch,
):
    monkeypatch.setattr(preloading, "_PRELOADED", None)
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv(zerogpu.PRELOAD_ENV, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")
    choices, left = offers.offered("embedded")
    assert choices[0] == "embedded"
    assert set(left) == {"llava-1.5-7b", "qwen2.5-vl-3b", "smolvlm-500m"} - set(choices)
    assert all("Not in the local Hugging Face cache" in why for why in left.values())
