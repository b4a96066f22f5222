"""The batch on Ray Data (`python -m demo.batch`) on a local Ray of two CPUs, shared by this file's
tests: its tokens, kinds, p and q equal the in-process analysis's (greedy and sampled, the same
seeds); a worker killed mid-batch is replaced and each example is written once; a killed run
started again skips what it wrote; an example that cannot be used is an error row while the rest
finish; and the Analysis tab reads the batch's files back to the same views."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from PIL import Image

pytest.importorskip("ray")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent

from demo.batch import inputs, run  # noqa: E402
from demo.page.analysis import opened, view  # noqa: E402
from demo.session import analysis  # noqa: E402

WORLD = {"task": "vqa", "n": 4, "seed": 0, "languages": ["en"]}
GREEDY = {"gamma": 4, "greedy": True, "temperature": 1.0, "top_p": 1.0, "seed": 0, "max_new_tokens": 48}
SAMPLED = GREEDY | {"greedy": False, "temperature": 0.8, "seed": 5}
DRAFTERS = ("text-only", "image-aware")
COLUMNS = ["example", "drafter", "position", "token_id", "kind", "p", "q", "rejected_id", "rejected_p", "rejected_q"]


@pytest.fixture(scope="module")
def ray_session():
    import ray

    os.environ.setdefault("RAY_agent_register_timeout_ms", run.AGENT_WAIT_MS)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def greedy_out(ray_session, tmp_path_factory):
    """One greedy batch of two drafters on three examples, over two workers: read by several tests."""
    out = tmp_path_factory.mktemp("greedy")
    return out, world_batch(out, GREEDY, drafters=DRAFTERS, workers=2, n=3)


def world_batch(out, settings=GREEDY, drafters=("text-only",), workers=1, n=4, **kw) -> dict:
    spec = WORLD | {"n": n}
    table = inputs.world(spec["task"], n, spec["seed"], tuple(spec["languages"]))
    return run.run(
        table, out, "embedded", list(drafters), settings, source={"world": spec}, world=spec, workers=workers,
        progress=False, **kw,
    )  # fmt: skip


def in_process(settings: dict, drafters=("text-only",), n=4, threads: int = 1) -> pd.DataFrame:
    """The Analysis tab's own decoding of the same examples: decode_examples, example i seeded seed + i,
    with as many torch threads as the workers had (float sums are bit-equal only so)."""
    import torch

    held = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _in_process(settings, drafters, n)
    finally:
        torch.set_num_threads(held)


def _in_process(settings, drafters, n) -> pd.DataFrame:
    from demo.engine.sampling import Sampling

    items = inputs.world_items(WORLD | {"n": n})
    sampling = None
    if not settings["greedy"]:
        sampling = Sampling(False, settings["temperature"], 0, settings["top_p"], settings["seed"])
    rows = []
    steps = analysis.decode_examples(
        "embedded", list(drafters), items, settings["gamma"], settings["max_new_tokens"], sampling
    )
    for step in steps:
        if isinstance(step, analysis.Decoded):
            for t in step.trace.tokens:
                rej = t.rejection
                rows.append(
                    [step.example, step.drafter, t.index, t.token_id, t.kind, t.p, t.q, rej and rej.id, rej and rej.p,
                     rej and rej.q]
                )  # fmt: skip
    want = pd.DataFrame(rows, columns=COLUMNS).sort_values(["example", "drafter", "position"], ignore_index=True)
    return want.astype(object).where(want.notna(), None)


def threads(out: Path) -> int:
    held = set(pd.read_parquet(out / "examples.parquet")["torch_threads"])
    assert len(held) == 1
    return held.pop()


def tokens(out: Path) -> pd.DataFrame:
    df = pd.read_parquet(out / "tokens.parquet")[COLUMNS].astype(object)
    return df.where(df.notna(), None).sort_values(["example", "drafter", "position"], ignore_index=True)


def test_a_batch_writes_the_tokens_kinds_p_and_q_of_the_in_process_analysis_greedy(greedy_out):
    out, manifest = greedy_out
    assert tokens(out).values.tolist() == in_process(GREEDY, DRAFTERS, 3, threads(out)).values.tolist()
    assert len(manifest["workers"]["pids"]) == 2  # two worker processes, each holding the models


def test_a_sampled_batch_writes_the_tokens_of_the_in_process_analysis_with_the_same_seeds(ray_session, tmp_path):
    manifest = world_batch(tmp_path, SAMPLED, n=3)
    got = tokens(tmp_path)
    assert got.values.tolist() == in_process(SAMPLED, n=3, threads=threads(tmp_path)).values.tolist()
    assert "resampled" in set(got["kind"])  # at temperature 0.8 the residual is drawn somewhere
    assert manifest["seeds"] == "example i: seed + i"


def test_the_batch_writes_its_four_files_and_the_engines_names_agree_with_their_counts(greedy_out):
    out, manifest = greedy_out
    for name in ("tokens.parquet", "examples.parquet", "errors.parquet", "manifest.json", "report.html"):
        assert (out / name).is_file(), name
    examples = pd.read_parquet(out / "examples.parquet")
    assert sorted(examples["example"]) == [0, 0, 1, 1, 2, 2]
    one = examples.iloc[0]  # the engines' names agree with the counts they name
    assert sum(one["acceptance_histogram"]) == one["num_spec_steps"] == one["spec_verify_ct"]
    assert sum(k * h for k, h in enumerate(one["spec_accept_histogram"])) == one["spec_accept_token_num"]
    assert one["mean_acceptance_length"] == pytest.approx(1 + one["num_accepted_draft_tokens"] / one["num_spec_steps"])
    assert manifest["settings"] == GREEDY and manifest["versions"]["ray"] and manifest["ray"]["cluster"]["CPU"] == 2


def test_a_worker_killed_mid_batch_is_replaced_and_each_example_is_written_once(ray_session, tmp_path):
    killed = []

    def kill_first(examples, pids):
        if not killed:
            killed.append(next(iter(pids)))
            os.kill(killed[0], signal.SIGKILL)  # the worker process that wrote the first part dies

    manifest = world_batch(tmp_path, workers=2, n=4, on_part=kill_first)
    examples = pd.read_parquet(tmp_path / "examples.parquet")
    assert sorted(examples["example"]) == list(range(4))  # every example, once
    assert killed and len(manifest["workers"]["pids"]) >= 2
    assert tokens(tmp_path).values.tolist() == in_process(GREEDY, n=4, threads=threads(tmp_path)).values.tolist()


def test_a_killed_run_started_again_skips_what_it_wrote_and_loses_nothing(ray_session, tmp_path):
    out = tmp_path / "batch"
    command = [sys.executable, "-m", "demo.batch", "--task", "vqa", "--n", "6", "--max-new-tokens", "48"]
    command += ["--out", str(out), "--address", ray_session, "--no-progress"]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not run.committed(out) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    child.send_signal(signal.SIGKILL)  # killed as soon as its first part is written
    child.wait()
    before = len(run.committed(out))
    assert 0 < before < 6, child.stderr.read().decode()[-2000:]
    manifest = run.run(
        inputs.world("vqa", 6, 0, ("en",)), out, "embedded", ["text-only"], GREEDY | {"temperature": 0.8, "top_p": 0.95},
        source={"world": WORLD | {"n": 6}}, world=WORLD | {"n": 6}, progress=False,
    )  # fmt: skip
    examples = pd.read_parquet(out / "examples.parquet")
    assert sorted(examples["example"]) == list(range(6))  # nothing lost, nothing twice
    assert manifest["runs"][-1]["resumed_with"] == before
    assert len(tokens(out).drop_duplicates()) == len(tokens(out))


def test_an_example_that_cannot_be_used_is_an_error_row_while_the_rest_finish(ray_session, tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    items = inputs.world_items(WORLD | {"n": 2})
    lines = []
    for i, item in enumerate(items):
        item.image.save(folder / f"{i}.png")
        lines.append({"file_name": f"{i}.png", "question": item.question, "answer": item.answer})
    (folder / "broken.png").write_bytes(b"not an image")
    Image.new("RGB", (8, 8)).save(folder / "gone.png")
    lines += [{"file_name": "broken.png", "question": "What colour?"}, {"file_name": "gone.png", "question": "Shape?"}]
    (folder / "metadata.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    table = inputs.folder(folder)
    (folder / "gone.png").unlink()  # listed, then missing when the worker reads it
    run.run(table, tmp_path / "out", "embedded", ["text-only"], GREEDY, source={"folder": str(folder)}, progress=False)
    errors = pq.read_table(tmp_path / "out" / "errors.parquet").to_pandas()
    assert sorted(errors["source"]) == ["broken.png", "gone.png"]
    assert "not an image" in errors.set_index("source").loc["broken.png", "reason"]
    assert "missing" in errors.set_index("source").loc["gone.png", "reason"]
    examples = pd.read_parquet(tmp_path / "out" / "examples.parquet")
    assert sorted(examples["source"]) == ["0.png", "1.png"] and examples["correct"].isna().all()  # no scene: unscored


def test_the_tab_reads_a_batch_back_to_the_views_of_the_same_runs(greedy_out):
    out, _ = greedy_out
    batch = opened.read(out)
    assert (
        batch.drafters == list(DRAFTERS) and len(batch.runs) == 6 and {r.example for r in batch.compared()} == {0, 1, 2}
    )
    live = view.Batch("embedded", "vqa", list(DRAFTERS), 4, 3, 0, 48)
    items = inputs.world_items(WORLD | {"n": 3})
    import torch

    held = torch.get_num_threads()
    torch.set_num_threads(threads(out))  # as the workers ran
    steps = list(analysis.decode_examples("embedded", live.drafters, items, 4, 48))
    torch.set_num_threads(held)
    for step in steps:
        if isinstance(step, analysis.Decoded):
            live.runs.append(view.Run(len(live.runs) + 1, step.example, items[step.example], step.drafter,
                                      step.trace, step.observations, step.correct))  # fmt: skip
    assert view.summaries(batch) == view.summaries(live)
    assert view.headline_html(batch, view.summaries(batch)) == view.headline_html(live, view.summaries(live))
    assert view.runs_table(batch).values.tolist() == view.runs_table(live).values.tolist()
