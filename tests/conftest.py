import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import races  # noqa: E402
import tiny  # noqa: E402

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
