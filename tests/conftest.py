import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The suite runs in two worker processes (pyproject's `-n 2`, pytest-xdist), one per core of CI's
# 2-core machine. Each worker, and each server or app it starts, computes on one thread: two
# workers of torch's default two threads would oversubscribe the cores, and its OpenMP threads
# spin while they wait (the quick training run took 2.5x as long). Each worker has its own Gradio
# upload folder, whose size the front door caps and trims. In one process (`-n 0`) nothing changes.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER:
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"  # child processes: torch reads it when it starts
    os.environ.setdefault("GRADIO_TEMP_DIR", str(Path(tempfile.gettempdir()) / f"gradio-{WORKER}"))

# The work budget's estimates learn from this machine's measured costs (`budget.learn`), which the
# suite's own load would make depend on test order; its tests ask for learning where they test it.
os.environ.setdefault("DEMO_BUDGET_LEARN", "0")

import races  # noqa: E402
import tiny  # noqa: E402
from browser_app import app_url, chromium  # noqa: E402, F401 (one browser and app per worker, for every browser file)

from demo.engine.drafters import Drafter  # noqa: E402
from demo.engine.speculative import Target  # noqa: E402
from demo.models.loader import Loaded, Preset  # noqa: E402
from demo.models.vocab import image_placeholder_ids, stop_ids_of  # noqa: E402


@pytest.fixture(scope="session")
def tok():
    return tiny.tokenizer()


@pytest.fixture(scope="session")
def world(tok):
    """A tiny LLaVA target with drafters that always, never and partly agree with it."""
    processor = tiny.processor(tok)
    target_model = tiny.llava(tok)
    target = Target(target_model, tok, name="tiny-llava", stop_ids=stop_ids_of(tok, target_model))
    loaded = Loaded(Preset("tiny", "", ()), target, processor, torch.device("cpu"))
    blocked = image_placeholder_ids(processor)

    def add(name, model, kind, blocked_ids=blocked):
        loaded.drafters[name] = Drafter(
            model,
            name=name,
            kind=kind,
            target_vocab_size=target.vocab_size,
            stop_ids=target.stop_ids,
            blocked_ids=blocked_ids,
        )
        if kind == "image-aware":
            loaded.drafter_processors[name] = processor

    never_text = tiny.llama(tok)
    never_image = tiny.noisy_copy(target_model, 0.0)
    for model in (never_text, never_image):  # uniform q: greedy always drafts id 0 (<unk>)
        torch.nn.init.zeros_(model.get_output_embeddings().weight)
    add("text-partly", tiny.text_part_of(target_model, tok), "text-only")
    add("text-never", never_text, "text-only")
    # The target itself drafting: it proposes exactly the target's own choices, placeholders included.
    add("image-always", target_model, "image-aware", blocked_ids=frozenset())
    add("image-partly", tiny.noisy_copy(target_model, 0.3), "image-aware")
    add("image-never", never_image, "image-aware")
    return loaded


@pytest.fixture(scope="session")
def answers(world):
    """The tiny target's own greedy answers (the autoregressive loop) to every case of `races.CASES`."""
    return [races.ar(world, image, question).summary.token_ids for image, question in races.CASES]


# The files that take longest first, so that the two workers (each takes a file at a time) end
# together rather than one waiting on the other's last long file (pyproject turns off xdist's own
# reordering, which puts the files with the most tests first). The soak and the browser tests each
# run a server beside their client or browser, and beside each other they slowed each other most:
# with soak then browser first the soak took 153-174 s and the suite 486 s; with trees and layer
# skip (one process of arithmetic each) beside the soak instead, 115 s and 472 s (2026-12-05).
# The quick training run (test_world) is the longest single test and goes first; the feature
# drafters' sweep next to it. The browser files follow one another: each worker starts one app and
# one Chromium (browser_app) for all the browser files it takes. The exactness sweeps of trees,
# layer skip and prompt lookup run a covering design since (two fifths of their runs).
SLOWEST_FIRST = (
    "test_world.py",
    "test_soak.py",
    "test_batch.py",
    "test_feature_drafters.py",
    "test_trees.py",
    "test_layer_skip.py",
    "test_browser.py",
    "test_browser_class.py",
    "test_browser_classroom.py",
    "test_browser_controls.py",
    "test_browser_feature.py",
    "test_browser_proof.py",
    "test_space.py",
    "test_analysis_tab.py",
    "test_prompt_lookup.py",
    "test_sampling.py",
)


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: each file's tests keep their order
