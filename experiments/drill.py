"""How fast does a fresh target LM learn the option drills? Text only, parts scored separately.
usage (from the repository root of a checkout of 972c82c, which still has tasks.option_drill): PYTHONPATH=. python experiments/drill.py STEPS PER_ROW ROWS [checks|reverse|induct|next|multi|restate|layout] [COPY_ROWS]"""
import random, sys, time
cap = lambda w: w[0].upper() + w[1:]
import torch
from transformers import AutoTokenizer
from demo.world.models import build
from demo.world.fit import fit
from demo.world.data import collate
from demo.world.tasks import option_drill, LETTERS

STEPS, PER_ROW, ROWS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
FORM = sys.argv[4] if len(sys.argv) > 4 else "checks"
tok = AutoTokenizer.from_pretrained("assets/world/target")
T = lambda s: tok(s, add_special_tokens=False)["input_ids"]


KINDS = []
TRAINING = [True]


def multi_parts(rng, k=4):
    """One options list, then k lookups of its options in random order (training only)."""
    import re
    context, answer = option_drill(rng)
    listed, conclusion = context.split(". So")
    options = re.findall(r"([ABCD])\. ([a-z ]+?)(?:,|$)", listed[len("Options: "):])
    said = dict(options)[answer[-2]]
    stem = conclusion[:len(conclusion) - len(said) - 2]  # " it is a"
    parts = [(" " + listed + ".", None)]
    for l, t in rng.sample(options, k):
        parts += [(" So" + stem + " " + t + ".", None), (f" {t[0].upper() + t[1:]}", "struct"), (" is option", "struct"),
                  (f" {l}", "letter"), (".", "struct")]
    return None, None, parts


def drill_parts(rng):
    if FORM == "multi" and TRAINING[0]:
        return multi_parts(rng)
    context, answer = option_drill(rng)
    parts = [(" " + context, None)]
    import re
    if FORM == "next":
        letter = answer[-2]
        listed, conclusion = context.split(". So")
        options = re.findall(r"([ABCD])\. ([a-z ]+?)(?:,|$)", listed[len("Options: "):])
        context = "Options: " + ", ".join(f"{t} {l}" for l, t in options) + ". So" + conclusion[:-1]
        answer = f"{letter}. The answer is {letter}."
        kind = {"So it is a": "shape", "So it is at": "position", "So there ar": "count"}.get(("So" + conclusion)[:11], "colour")
        parts = [(" " + context, None), (" " + letter, "letter"), (".", "struct"),
                 (" The answer is", "struct"), (f" {letter}", "final"), (".", "struct")]
        KINDS.append(kind)
        return context, answer, parts


    if FORM == "layout":
        from demo.world.tasks import qa
        from demo.world.scenes import sample_scene
        from demo.world.text import prompt_text
        while True:
            got = qa("multiple_choice", sample_scene(rng), rng)
            if got: break
        question, answer = got
        reason, rest = answer.split(" A. ", 1)
        letter = answer[-2]
        parts = [(prompt_text(question) + reason, None)]
        for m in re.finditer(r"([ABCD])\. ([a-z ]+): ((?:an? |the )?[a-z ]+?) is( not)? ((?:an? |the )?[a-z ]+?)\.", " A. " + rest):
            l, t, said, neg, again = m.groups()
            parts += [(f" {l}.", "struct"), (f" {t}", "copy"), (":", "struct"), (f" {said}", "restate"), (" is", "struct")]
            parts += [(" not", "verdict"), (f" {again}", "struct")] if neg else [(f" {again}", "verdict")]
            parts += [(".", "struct")]
        parts += [(" The answer is", "struct"), (f" {letter}", "final"), (".", "struct")]
        assert "".join(p for p, _ in parts) == prompt_text(question) + answer, (parts, answer)
        kind = question.split()[0]
        KINDS.append(kind)
        return None, None, parts
    if FORM == "restate":
        letter = answer[-2]
        listed, conclusion = context.split(". So")
        options = re.findall(r"([ABCD])\. ([a-z ]+?)(?:,|$)", listed[len("Options: "):])
        said = dict(options)[letter]
        kind = next((k for p, k in (("So it is at", "position"), ("So it is a ", "shape"), ("So there ar", "count")) if ("So" + conclusion).startswith(p)), "colour")
        art = {"shape": "a ", "position": "the ", "colour": "", "count": ""}[kind]
        parts = [(" " + context, None)]
        for l, t in options:
            parts += [(f" {l}.", "struct"), (f" {t}", "copy"), (":", "struct"), (f" {art}{said}", "restate"), (" is", "struct")]
            if t == said:
                parts += [(f" {art}{said}" if art else f" {said}", "verdict"), (".", "struct")]
                break
            parts += [(" not", "verdict"), (f" {art}{t}", "struct"), (".", "struct")]
        parts += [(" The answer is", "struct"), (f" {letter}", "final"), (".", "struct")]
        answer = "".join(p for p, _ in parts[1:]).strip()
        KINDS.append(kind)
        return context, answer, parts
    if FORM == "induct":
        letter = answer[-2]
        listed, conclusion = context.split(". So")
        options = re.findall(r"([ABCD])\. ([a-z ]+?)(?:,|$)", listed[len("Options: "):])
        context = "Options: " + ", ".join(f"{t} ({l})" for l, t in options) + ". So" + conclusion[:-1]
        answer = f"({letter}). The answer is {letter}."
        parts = [(" " + context, None), (" (", "struct"), (letter, "letter"), (").", "struct"),
                 (" The answer is", "struct"), (f" {letter}", "final"), (".", "struct")]
        return context, answer, parts
    if FORM in ("reverse", "multi"):
        letter = answer[-2]
        options = dict(re.findall(r"([ABCD])\. ([a-z ]+?)(?:,|\.)", context.split(". So")[0] + "."))
        w = options[letter]
        answer = f"{w[0].upper() + w[1:]} is option {letter}. The answer is {letter}."
        parts += [(f" {w[0].upper() + w[1:]}", "struct"), (" is option", "struct"), (f" {letter}", "letter"),
                  (". The answer is", "struct"), (f" {letter}", "struct"), (".", "struct")]
        return context, answer, parts
    for l, text, v in re.findall(r"([ABCD])\. ([a-z ]+): (yes|no)\. ", answer):
        parts += [(f" {l}.", "struct"), (f" {text}", "copy"), (":", "struct"), (f" {v}", "verdict"), (".", "struct")]
    letter = answer[-2]
    parts += [(" The answer is", "struct"), (f" {letter}", "letter"), (".", "struct")]
    return context, answer, parts


def row(rng, n):
    ids, labels, kinds = [], [], []
    for _ in range(n):
        context, answer, parts = drill_parts(rng)
        start = len(ids)
        for text, kind in parts:
            t = T(text)
            ids += t; labels += t if kind else [-100] * len(t); kinds += [kind] * len(t)
        if context is not None:
            assert ids[start:] == T(" " + context) + T(" " + answer)
    return ids, labels, kinds


COPY = int(sys.argv[5]) if len(sys.argv) > 5 else 0  # rows of random tokens given twice, loss on the second copy


def copy_row(rng, n=24):
    seq = [rng.randrange(10, len(tok)) for _ in range(n)]
    return seq + seq, [-100] * n + seq


def stream(rng):
    while True:
        rows = [row(rng, PER_ROW) for _ in range(ROWS)]
        rows += [(*copy_row(rng), None) for _ in range(COPY)]
        yield collate([(i, l) for i, l, _ in rows], tok.pad_token_id)


@torch.no_grad()
def evaluate(lm, n=200):
    lm.eval()
    rng = random.Random(12345)
    TRAINING[0] = False
    KINDS.clear()
    rows = [row(rng, 1) for _ in range(n)]
    kinds_of = list(KINDS)
    b = collate([(i, l) for i, l, _ in rows], tok.pad_token_id)
    pred = lm(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits.argmax(-1)
    tally = {k: [0, 0] for k in ("copy", "restate", "verdict", "letter", "final", "drill")}
    for r, (ids, labels, kinds) in enumerate(rows):
        ok_all = True
        spans = {}
        for j in range(1, len(ids)):
            if kinds[j] is None: continue
            ok = pred[r, j - 1].item() == ids[j]
            ok_all &= ok
            if kinds[j] != "struct":
                # group consecutive tokens of one span
                key = (kinds[j], j if kinds[j - 1] != kinds[j] else spans.get(j - 1, (None, j))[1])
                spans[j] = key
        per = {}
        for j, key in spans.items():
            per.setdefault(key, True)
            per[key] &= pred[r, j - 1].item() == ids[j]
        for (kind, _), ok in per.items():
            tally[kind][0] += ok; tally[kind][1] += 1
        tally["drill"][0] += ok_all; tally["drill"][1] += 1
        if kinds_of:
            tally.setdefault(kinds_of[r], [0, 0]); tally[kinds_of[r]][0] += ok_all; tally[kinds_of[r]][1] += 1
    lm.train()
    TRAINING[0] = True
    return {k: round(a / b, 3) for k, (a, b) in tally.items() if b}


torch.manual_seed(0); torch.set_num_threads(2)
target = build("target", tok)
lm = target  # text only: the LLaVA model runs text without pixels
params = list(dict.fromkeys(list(target.model.language_model.parameters()) + list(target.lm_head.parameters())))
s = stream(random.Random(0))
t0 = time.time()
def loss_of(step):
    if step and step % 50 == 0:
        print(step, evaluate(lm), f"{time.time() - t0:.0f}s", flush=True)
    return lm(**next(s)).loss
fit(params, STEPS, float(__import__("os").environ.get("LR", "1e-3")), loss_of, "drill")
print(STEPS, evaluate(lm), f"{time.time() - t0:.0f}s", flush=True)
