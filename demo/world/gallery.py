"""The example gallery shipped with the models: held-out scenes for every task family.

Contract: `write_examples(dir)` writes PNGs at display resolution and `examples.json`, a list of
{"image", "task", "question", "answer"} (image is the file name in the same directory), and the
same examples in the other languages the world speaks, `examples-de.json` and
`examples-zh.json` (`language_file`), each entry with its "language" too: the same scenes, so
the same images, asked and answered in that language. Pure function of the held-out
generator: the same files every time.
"""

import json
from pathlib import Path

from .tasks import LANGUAGES, TASKS, heldout_examples

# How many gallery examples per task: every family is covered, the long ones twice.
PER_TASK = {
    "description": 2,
    "caption": 2,
    "multiple_choice": 2,
    "vqa_yesno": 1,
    "vqa_colour": 1,
    "vqa_shape": 1,
    "vqa_count": 1,
    "vqa_position": 1,
}


def language_file(language: str) -> str:
    """The gallery's index of examples in `language`: examples.json for English (as it always was)."""
    return "examples.json" if language == "en" else f"examples-{language}.json"


def write_examples(directory: Path, seed: int = 1000) -> list[dict]:
    """Every language's gallery; returns the English entries."""
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for language in LANGUAGES:
        entries = []
        for task in TASKS:
            for i, ex in enumerate(heldout_examples(task, PER_TASK[task], seed=seed, language=language)):
                name = f"{task}-{i}.png"
                if language == "en":
                    ex.image.save(directory / name, optimize=True)
                entry = {"image": name, "task": task, "question": ex.question, "answer": ex.answer}
                entries.append(entry if language == "en" else entry | {"language": language})
        (directory / language_file(language)).write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
        out[language] = entries
    return out["en"]
