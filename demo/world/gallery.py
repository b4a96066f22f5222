"""The example gallery shipped with the models: held-out scenes for every task family.

Contract: `write_examples(dir)` writes PNGs at display resolution and `examples.json`, a list of
{"image", "task", "question", "answer"} (image is the file name in the same directory). Pure
function of the held-out generator: the same files every time.
"""

import json
from pathlib import Path

from .tasks import TASKS, heldout_examples

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


def write_examples(directory: Path, seed: int = 1000) -> list[dict]:
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    for task in TASKS:
        for i, ex in enumerate(heldout_examples(task, PER_TASK[task], seed=seed)):
            name = f"{task}-{i}.png"
            ex.image.save(directory / name, optimize=True)
            entries.append({"image": name, "task": task, "question": ex.question, "answer": ex.answer})
    (directory / "examples.json").write_text(json.dumps(entries, indent=1) + "\n")
    return entries
