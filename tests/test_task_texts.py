"""The world's questions and answers are the texts they were: every task, form and language,
both splits, hashed against a digest taken before the per-language dispatch was merged."""

import hashlib

import pytest

from demo.world.tasks import LANGUAGES, TASKS, examples

pytestmark = pytest.mark.fast

DIGEST = "c2aeef748503d9c77bc4137e74d68fafc1704214ec0e5e8722587f1cdb29b071"
FORMS = ("multiple_choice_brief", "multiple_choice_early", "multiple_choice")  # English has all three


def _texts():
    for split in ("train", "heldout"):
        for language in LANGUAGES:
            for task in TASKS:
                forms = FORMS if task == "multiple_choice" and language == "en" else (None,)
                for form in forms:
                    kw = {"form": form} if form else {}
                    for e in examples(split, task, 25, seed=3, render_images=False, language=language, **kw):
                        yield f"{split}|{language}|{task}|{form}|{e.question}\x00{e.answer}\n"


def test_every_task_writes_the_texts_it_wrote_before_the_dispatch_was_merged():
    digest = hashlib.sha256("".join(_texts()).encode()).hexdigest()
    assert digest == DIGEST
