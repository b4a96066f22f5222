"""Training data as tensors: rendered scene pools, encoded conversations, padded batches.

More, with its measurements: docs/modules.md.
"""

import random
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np
import torch
from tqdm import tqdm

from demo.lab.training import slots
from demo.lab.training.tokenization import IMAGE_SEQ_LENGTH, IMAGE_TOKEN, prompt_text
from demo.world.scenes import COLOURS, GRID, POSITIONS, SHAPES, SIZES, Scene, render, sample_scenes
from demo.world.tasks import qa, split_task
from demo.world.tasks_en import BRIEF, EARLY

# Rough answer+prompt length in tokens per task; sets how many examples fill a batch.
TYPICAL_TOKENS = {
    "description": 130,
    "caption": 50,
    "multiple_choice": 110,
    "vqa_colour": 30,
    "vqa_shape": 30,
    "vqa_count": 28,
    "vqa_position": 32,
    "vqa_yesno": 32,
}
TYPICAL_TOKENS[BRIEF] = TYPICAL_TOKENS[EARLY] = TYPICAL_TOKENS["multiple_choice"]
# Tokens of a text per token of the same text in English, with the grown tokenizer (measured on
# held-out questions and answers of every task: German 16,343 tokens, Chinese 11,851, English 17,339).
LANGUAGE_LENGTH = {"de": 0.95, "zh": 0.7}


def typical_tokens(task: str) -> int:
    """TYPICAL_TOKENS of a task in any language ("de/caption", `tasks.split_task`)."""
    language, base = split_task(task)
    return TYPICAL_TOKENS[task] if language == "en" else round(TYPICAL_TOKENS[base] * LANGUAGE_LENGTH[language])


def _pixels(args):
    """Worker: render a chunk of scenes and run the image processor on them (numpy out)."""
    scenes, image_processor = args
    return image_processor([render(s) for s in scenes], return_tensors="np")["pixel_values"]


@dataclass
class ScenePool:
    scenes: list[Scene]
    pixels: torch.Tensor  # [S, 3, H, W] fp16, the processor's output
    cells: torch.Tensor  # [S, GRID*GRID, 3] long: shape, colour, size per cell; -1 where empty
    slot_ids: torch.Tensor  # [S, GRID*GRID, K] word ids describing each cell (see slots.py)
    slot_mask: torch.Tensor  # [S, GRID*GRID, K] 1 where slot_ids is a word

    @classmethod
    def build(cls, split: str, n: int, seed: int, processor, workers: int = 2) -> "ScenePool":
        scenes = sample_scenes(split, n, seed)
        chunks = [(scenes[i : i + 256], processor.image_processor) for i in range(0, n, 256)]
        if len(chunks) == 1:
            parts = [_pixels(chunks[0])]
        else:  # spawned workers: forking after torch has started its thread pool can hang
            with get_context("spawn").Pool(workers) as pool:
                parts = list(tqdm(pool.imap(_pixels, chunks), total=len(chunks), desc=f"render {split}"))
        cells = torch.full((n, GRID * GRID, 3), -1, dtype=torch.long)
        for i, s in enumerate(scenes):
            for o in s.objects:
                cells[i, o.cell] = torch.tensor(
                    [SHAPES.index(o.shape), list(COLOURS).index(o.colour), SIZES.index(o.size)]
                )
        return cls(
            scenes, torch.from_numpy(np.concatenate(parts)).half(), cells, *slots.slot_ids(processor.tokenizer, scenes)
        )


def encode(tok, question: str, answer: str | None, image: bool = True) -> tuple[list[int], list[int]]:
    prompt = prompt_text(question).replace(IMAGE_TOKEN, IMAGE_TOKEN * IMAGE_SEQ_LENGTH)
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    if not image:
        image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
        ids = [t for t in ids if t != image_id]
    if answer is None:
        return ids, [-100] * len(ids)
    ans = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return ids + ans, [-100] * len(ids) + ans


def collate(rows: list[tuple], pad_id: int, left: bool = False) -> dict:
    """Pad (ids, labels) rows to one length; left padding is for generation."""
    width = max(len(row[0]) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(width - len(row[0]), width) if left else slice(0, len(row[0]))
        input_ids[i, span], labels[i, span], mask[i, span] = torch.tensor(row[0]), torch.tensor(row[1]), 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


@dataclass
class Item:
    """One training conversation: a scene of the pool, a task, the question and the answer."""

    scene: int
    task: str
    question: str
    answer: str


def sample_items(pool: ScenePool, weights: dict[str, float], n: int, seed: int) -> list[Item]:
    rng = random.Random(seed)
    tasks, w = list(weights), list(weights.values())
    out = []
    while len(out) < n:
        task, s = rng.choices(tasks, w)[0], rng.randrange(len(pool.scenes))
        pair = qa(task, pool.scenes[s], rng)
        if pair is not None:
            out.append(Item(s, task, *pair))
    return out


def batches(
    pool: ScenePool,
    tok,
    weights: dict[str, float],
    tokens: int,
    rng: random.Random,
    image: bool = True,
    max_objects: int | None = None,
) -> Iterator[dict]:
    """Endless batches; each is one task, with about `tokens` tokens, freshly written questions,
    on the pool's scenes (those with at most `max_objects` objects, if given)."""
    tasks, w = list(weights), list(weights.values())
    scenes = [i for i, scene in enumerate(pool.scenes) if max_objects is None or len(scene.objects) <= max_objects]
    while True:
        task = rng.choices(tasks, w)[0]
        items = []
        while len(items) < max(1, tokens // typical_tokens(task)):
            s = rng.choice(scenes)
            pair = qa(task, pool.scenes[s], rng)
            if pair is not None:
                items.append(Item(s, task, *pair))
        yield item_batch(pool, tok, items, image)


def item_batch(pool: ScenePool, tok, items: list[Item], image: bool = True) -> dict:
    """Encoded items; with `image`, the scenes' pixels and pool indices ("scenes")."""
    batch = collate([encode(tok, it.question, it.answer, image) for it in items], tok.pad_token_id)
    if image:
        batch["scenes"] = torch.tensor([it.scene for it in items])
        batch["pixel_values"] = pool.pixels[batch["scenes"]].float()
    return batch


def facts(scene: Scene, rng: random.Random, verify: bool = False) -> list[str]:
    """Every lookup the scene answers, as "KEY is VALUE." sentences in a random order: shape ->
    colour and colour -> shape where the key is unique in the scene, place -> colour always.
    Dense lookups with the key right before "is": the form of the short answers ("The circle is
    red."), many per scene, so the LM learns to find an object in its image tokens by what it is.
    With `verify`, the `verification_facts` too.
    """
    objects = scene.objects
    shapes, colours = [o.shape for o in objects], [o.colour for o in objects]
    out = [f"{o.shape} is {o.colour}." for o in objects if shapes.count(o.shape) == 1]
    out += [f"{POSITIONS[o.cell]} is {o.colour}." for o in objects]
    out += [f"{o.colour} is {o.shape}." for o in objects if colours.count(o.colour) == 1]
    if verify:
        out += verification_facts(scene, rng)
    rng.shuffle(out)
    return out


def verification_facts(scene: Scene, rng: random.Random) -> list[str]:
    """A lookup checked against a word in the text: for each object whose shape is unique, its
    colour asked right and wrong ("is the circle red? yes." / "is the circle blue? no."), then
    one object on show and one colour-shape pair that is not ("is there a green square? no.").
    Multiple choice's verdict compares an option with a looked-up word, and yes/no needs the
    absence. With the loss on every token they cost the lookups: a full run of FULL with them
    read yes/no 92% (the shipped 55%) but colour 85% and shape 83%, and its place lookups 60-64%
    (README, "What moved yes/no"); the question is random by design (a wrong colour half the time),
    so `fact_batches` puts the loss on the verdict only. So masked, a full run read yes/no 91%,
    colour 96%, shape 96% and its place lookups 98-100% (README)."""
    objects = scene.objects
    shapes = [o.shape for o in objects]
    out = []
    for o in objects:
        if shapes.count(o.shape) == 1:
            other = rng.choice([c for c in COLOURS if c != o.colour])
            out += [f"is the {o.shape} {o.colour}? yes.", f"is the {o.shape} {other}? no."]
    shown = rng.choice(objects)
    out.append(f"is there a {shown.colour} {shown.shape}? yes.")
    present = {(o.colour, o.shape) for o in objects}
    colour, shape = rng.choice([(c, s) for c in COLOURS for s in SHAPES if (c, s) not in present])
    out.append(f"is there a {colour} {shape}? no.")
    return out


def fact_batches(
    pool: ScenePool, tok, scenes_per_batch: int, rng: random.Random, verify: bool = False
) -> Iterator[dict]:
    """Endless batches of rows (image tokens, then `facts`), with the pool indices ("scenes") for the slots."""
    image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    while True:
        rows, scenes = [], []
        for _ in range(scenes_per_batch):
            s = rng.randrange(len(pool.scenes))
            ids, labels = [image_id] * IMAGE_SEQ_LENGTH, [-100] * IMAGE_SEQ_LENGTH
            for fact in facts(pool.scenes[s], rng, verify):
                # A verification fact's question is random by design (a wrong colour half the
                # time): the loss goes on its verdict only, or it would teach that the word after
                # "the circle" need not be the circle's colour.
                asked, _, verdict = fact.rpartition("? ")  # asked is "" for a lookup fact
                question = tok(f" {asked}?", add_special_tokens=False)["input_ids"] if asked else []
                answer = tok(" " + verdict, add_special_tokens=False)["input_ids"]
                ids += question + answer
                labels += [-100] * len(question) + answer
            rows.append((ids, labels))
            scenes.append(s)
        batch = collate(rows, tok.pad_token_id)
        batch["scenes"] = torch.tensor(scenes)
        yield batch


DRILLS_PER_ROW = 2


def check_row(tok, question: str, answer: str) -> tuple[list[int], list[int]]:
    """One multiple-choice turn with the loss on its option checks, letter and end only: the
    prompt and the reason ("... So it is a circle.") are context."""
    ids, labels = encode(tok, question, answer)
    prompt_and_reason = encode(tok, question, answer[: answer.index(" A. ")])[0][:-1]  # its <|end|> dropped
    context = len(prompt_and_reason)
    assert ids[:context] == prompt_and_reason  # the checks start a word: the reason tokenises alike alone
    return ids, [-100] * context + labels[context:]


def drill_row(
    pool: "ScenePool", tok, rng: random.Random, n: int = DRILLS_PER_ROW, task: str = "multiple_choice"
) -> tuple[list[int], list[int], list[int]]:
    """`n` `check_row`s of `task` (a form of multiple choice) on random pool scenes as one row,
    and the scenes' pool indices in order (a row holds n images). In the question's own layout:
    the copy of an option from the question's list was learnt on these (95% of held-out turns
    after 600 steps alone, README) and not on short drills of the same checks."""
    ids, labels, scenes = [], [], []
    while len(scenes) < n:
        s = rng.randrange(len(pool.scenes))
        pair = qa(task, pool.scenes[s], rng)
        if pair is None:
            continue
        row_ids, row_labels = check_row(tok, *pair)
        ids, labels, scenes = ids + row_ids, labels + row_labels, scenes + [s]
    return ids, labels, scenes


def drill_batches(
    pool: "ScenePool", tok, rows: int, rng: random.Random, task: str = "multiple_choice"
) -> Iterator[dict]:
    """Endless batches of `rows` `drill_row`s of `task`, with the scenes' pool indices
    ("scenes", for the slots) and pixels, in turn order, as `item_batch` gives them."""
    while True:
        drawn = [drill_row(pool, tok, rng, task=task) for _ in range(rows)]
        batch = collate([(ids, labels) for ids, labels, _ in drawn], tok.pad_token_id)
        batch["scenes"] = torch.tensor([s for _, _, scenes in drawn for s in scenes])
        batch["pixel_values"] = pool.pixels[batch["scenes"]].float()
        yield batch
