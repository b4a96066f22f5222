"""Hub presets when the hub cannot be had: the answer comes within 10 s and local models keep working.

huggingface_hub reads HF_HUB_OFFLINE, HF_ENDPOINT and HF_HOME when it is imported, so each case
runs in a fresh interpreter with its own environment and an empty (or fake) Hugging Face cache.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_families

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, sys, time
import torch
from demo.models import loader
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.engine.speculative import speculative_generate

local_dir, hub_preset = sys.argv[1], sys.argv[2]
report = {}
start = time.perf_counter()
found = loader.availability(hub_preset)
report["availability"] = [found.ok, found.local, found.message, time.perf_counter() - start]
start = time.perf_counter()
try:
    loader.load(hub_preset)
    report["load"] = ["loaded", "", time.perf_counter() - start]
except Exception as error:
    report["load"] = [type(error).__name__, str(error), time.perf_counter() - start]
loader.PRESETS["local"] = loader.Preset(
    "local", local_dir + "/target", (loader.DrafterSpec("text", "text-only", local_dir + "/drafter"),)
)
loaded = loader.load("local")
trace = Trace.of(speculative_generate(
    loaded.target, loaded.drafter("text"), loaded.prompt(None, "Describe the image.", "text"), gamma=3,
    sampling=Sampling(), max_new_tokens=8, generator=torch.Generator(),
))
report["local_tokens"] = len(trace.summary.token_ids)
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def tiny_llava(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("offline") / "llava"
    tiny_families.build("llava", root)
    return root


def run(tiny_llava: Path, hf_home: Path, preset: str = "qwen2.5-vl-3b", **env) -> dict:
    # Every variable the hub, transformers or the demo reads is set here or absent, whatever the
    # caller exported (HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1 are common on offline machines).
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DEMO_", "TRANSFORMERS_", "HUGGINGFACE_"))
    }
    environment.update(HF_HOME=str(hf_home), PYTHONPATH=str(ROOT), **env)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tiny_llava), preset],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("REPORT "))


@pytest.mark.slow
def test_offline_hub_preset_is_refused_quickly_and_local_models_still_decode(tiny_llava, tmp_path):
    report = run(tiny_llava, tmp_path / "hf", HF_HUB_OFFLINE="1", DEMO_ALLOW_DOWNLOADS="1")
    ok, local, message, seconds = report["availability"]
    assert (ok, local) == (False, False) and seconds < 10
    assert message == (
        "Not in the local Hugging Face cache: Qwen/Qwen2.5-VL-3B-Instruct, Qwen/Qwen2.5-0.5B-Instruct; "
        "the hub is off (HF_HUB_OFFLINE=1)."
    )
    kind, text, seconds = report["load"]
    assert kind == "Unavailable" and seconds < 10
    assert (
        text == "Not in the local Hugging Face cache: Qwen/Qwen2.5-VL-3B-Instruct; the hub is off (HF_HUB_OFFLINE=1)."
    )
    assert report["local_tokens"] == 8


@pytest.mark.slow
def test_unreachable_hub_is_reported_quickly_and_local_models_still_decode(tiny_llava, tmp_path):
    report = run(tiny_llava, tmp_path / "hf", HF_ENDPOINT="http://127.0.0.1:9", DEMO_ALLOW_DOWNLOADS="1")
    ok, local, message, seconds = report["availability"]
    assert (ok, local) == (False, False) and seconds < 10
    assert message.startswith(
        "Not in the local Hugging Face cache: Qwen/Qwen2.5-VL-3B-Instruct, Qwen/Qwen2.5-0.5B-Instruct, "
        "and the hub cannot be reached ("
    )
    kind, text, seconds = report["load"]
    assert kind == "Unavailable" and text.startswith("Could not download Qwen/Qwen2.5-VL-3B-Instruct: ")
    assert seconds < 10
    assert report["local_tokens"] == 8


@pytest.mark.slow
def test_downloads_are_off_unless_allowed(tiny_llava, tmp_path):
    report = run(tiny_llava, tmp_path / "hf")
    ok, _, message, seconds = report["availability"]
    assert not ok and seconds < 10
    assert message == (
        "Not in the local Hugging Face cache: Qwen/Qwen2.5-VL-3B-Instruct, Qwen/Qwen2.5-0.5B-Instruct. "
        "Downloads are off: set DEMO_ALLOW_DOWNLOADS=1 to fetch them, or put them in the cache beforehand."
    )
    assert report["load"][0] == "Unavailable" and report["local_tokens"] == 8


def fake_cache(hf_home: Path, repo: str, files: Path) -> None:
    """Lay out `files` as the cached snapshot of `repo`, as huggingface_hub stores it."""
    entry = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = entry / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for file in files.iterdir():
        (snapshot / file.name).symlink_to(file)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("0" * 40)


@pytest.mark.slow
def test_cached_hub_preset_loads_offline_through_the_real_preset(tiny_llava, tmp_path):
    hf_home = tmp_path / "hf"
    fake_cache(hf_home, "llava-hf/llava-1.5-7b-hf", tiny_llava / "target")
    fake_cache(hf_home, "double7/vicuna-68m", tiny_llava / "drafter")
    report = run(tiny_llava, hf_home, preset="llava-1.5-7b", HF_HUB_OFFLINE="1")
    ok, local, message, _ = report["availability"]
    assert (ok, local) == (True, True)
    assert message.startswith("All model files are on this machine; it will run on cpu, float32, needs 0.0 GiB of ")
    assert report["load"][0] == "loaded"


def test_downloadable_preset_is_sized_against_free_memory_before_anything_loads(monkeypatch):
    from demo.models import devices, hub, loader

    monkeypatch.setenv("DEMO_ALLOW_DOWNLOADS", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "cached", lambda repo: None)
    monkeypatch.setattr(hub, "probe", lambda repo, seconds=hub.PROBE_SECONDS: None)  # the hub answers
    monkeypatch.setattr(devices, "probe", lambda: devices.Memory((), 8 * 2**30))
    assert loader.availability("llava-1.5-7b") == hub.Availability(
        False,
        False,
        "preset 'llava-1.5-7b' needs about 31.9 GiB of RAM in float32 on CPU, but only 8.0 GiB is available.",
    )
    monkeypatch.setattr(devices, "probe", lambda: devices.Memory((80 * 2**30,), 8 * 2**30))
    assert loader.availability("llava-1.5-7b") == hub.Availability(
        True,
        False,
        "Will be downloaded on first use: llava-hf/llava-1.5-7b-hf, double7/vicuna-68m; "
        "it will run on cuda:0, bfloat16, needs 15.9 GiB of 80.0 GiB free.",
    )


def test_a_snapshot_counts_as_present_only_with_config_and_every_weight_shard(tmp_path):
    import torch
    from safetensors.torch import save_file

    from demo.models import hub

    (tmp_path / "config.json").write_text("{}")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    save_file({"a": torch.zeros(3, 4)}, tmp_path / "model-00001-of-00002.safetensors")
    assert not hub.complete(tmp_path)  # a shard is missing: an interrupted download
    save_file({"b": torch.zeros(5), "c": torch.zeros(2, 2, 2)}, tmp_path / "model-00002-of-00002.safetensors")
    assert hub.complete(tmp_path)
    assert hub.count_params(tmp_path) == 12 + 5 + 8  # read from the headers, nothing loaded
