"""The page's examples: held-out scenes of the embedded world with their reference answers, in each
language the world speaks, and which example a request is (so the page can say whether the
target's answer matches the reference)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from demo import ASSETS
from demo.world.gallery import language_file
from demo.world.tasks import LANGUAGES


@dataclass(frozen=True)
class Example:
    image: str  # path to the image file
    question: str
    task: str
    answer: str
    language: str = "en"


EXAMPLES_DIR = ASSETS / "examples"


def load_examples(folder: Path = EXAMPLES_DIR, language: str = "en") -> list[Example]:
    """The examples in `language` in `folder`, as `demo.world.gallery` writes them: examples.json
    (English) or examples-LANG.json, a list of {"image", "task", "question", "answer"}, image
    being a file name in the folder. No file means no examples (the embedded world not trained
    yet, or not in that language)."""
    index = Path(folder) / language_file(language)
    if not index.exists():
        return []
    rows = json.loads(index.read_text())
    return [Example(str(Path(folder) / r["image"]), r["question"], r["task"], r["answer"], language) for r in rows]


@functools.lru_cache(maxsize=64)
def _pixels(path: str) -> bytes:
    with Image.open(path) as image:
        return image.convert("RGB").tobytes() + repr(image.size).encode()


def reference_for(image_path: Path | str | None, question: str, folder: Path = EXAMPLES_DIR) -> str | None:
    """The reference answer of the example this request is (the same pixels and question), or None."""
    if image_path is None:
        return None
    every = [e for language in LANGUAGES for e in load_examples(folder, language)]
    candidates = [e for e in every if e.question.strip() == str(question).strip()]
    if not candidates:
        return None
    try:
        pixels = _pixels(str(image_path))
    except OSError:
        return None
    return next((e.answer for e in candidates if _pixels(e.image) == pixels), None)
