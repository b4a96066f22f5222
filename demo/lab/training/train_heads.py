"""Train the drafters that read the target's hidden state: `feature` and `medusa`.

    python -m demo.lab.training.train_heads            # data, the speculator (10,000 steps), Medusa heads (400), save
    python -m demo.lab.training.train_heads --compare  # and the forms without the look, on the same data

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from demo.engine import heads
from demo.lab.training.data import collate, encode
from demo.world.tasks import LANGUAGES, TASKS, train_examples

OUT = Path("assets/world")
# Conversations per task family and language: descriptions, the longest answers and the
# benchmark's task, have the most.
PER_TASK = {"description": 240} | {t: 40 for t in TASKS if t != "description"}
UNROLL = 4  # draft steps the speculator is trained over (it chains on past them)
MEDUSA_HEADS = 5
BATCH = 256  # answer positions per step
PER = 8  # of them from one conversation, for a speculator with `look` (`by_conversation`)
# The shipped speculator's shape: what a draft reads is what it costs on a CPU (docs/drafters-feature.md),
# and at 10,000 steps this one drafts a longer held-out chain than inner 1 with 4 heads did at 2,000.
INNER = 0.5  # the shared stage's inner width, times the hidden size
LOOK = 2  # the speculator's heads of attention over the prompt's states (`heads.Look`)
STEPS, MEDUSA_STEPS = 10000, 400  # the shipped checkpoints' (docs/drafters-feature.md)
# The speculator's token loss: this share (`--distil`) is the cross-entropy against the target's
# whole next-token distribution (f_{j+1+k} @ E^T, free from the features at hand), the rest against
# its argmax. 0: at 400 steps the whole distribution gave a shorter greedy chain (held out 2.12 vs
# 2.24 drafts of 4), docs/drafters-feature.md.
DISTIL = 0.0


def conversations(seed: int, scale: float = 1.0) -> list[tuple[str, str, object]]:
    """(language, task, example) for every training conversation, in a fixed order."""
    return [
        (lang, task, ex)
        for lang in LANGUAGES
        for task in TASKS
        for ex in train_examples(task, max(1, round(PER_TASK[task] * scale)), seed=seed + 11, language=lang)
    ]


@torch.no_grad()
def target_data(target, processor, rows) -> dict:
    """The target's own choices along training conversations, and its last hidden states there,
    flattened over answer positions: feats [N, C] fp16 (f_j), nxt [N] (the target's greedy token
    j + 1, its argmax there), left [N] (how many following positions continue the target's own
    greedy path: positions where its choice is the conversation's next token), seq [N].

    One teacher-forced forward per batch over prompt + the world's answer gives every position's
    hidden state and choice at once (a free-running generation of the same answers measured 430 s
    per 64 conversations on this shared CPU). Where the target's choice is the answer's next token,
    the answer is the target's own greedy path; a chain of drafts is trained only along such runs."""
    tok = processor.tokenizer
    prompts = [encode(tok, ex.question, None)[0] for _, _, ex in rows]
    answers = [tok(ex.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for _, _, ex in rows]
    pixels = processor.image_processor([ex.image for _, _, ex in rows], return_tensors="pt")["pixel_values"]
    feats, nxt, left, seq = [], [], [], []
    for start in range(0, len(rows), 32):
        idx = list(range(start, min(start + 32, len(rows))))
        batch = collate([(prompts[i] + answers[i], prompts[i] + answers[i]) for i in idx], tok.pad_token_id)
        out = target(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            pixel_values=pixels[idx],
            output_hidden_states=True,
        )
        h = out.hidden_states[-1]  # [B, T, C]: after the final norm, logits = h @ E^T
        choice = out.logits.argmax(-1)  # [B, T]
        for b, i in enumerate(idx):
            p, m = len(prompts[i]), len(answers[i])
            own = choice[b, p - 1 : p + m - 1]  # the target's token after each position
            agree = own == torch.tensor(answers[i])
            run = torch.zeros(m, dtype=torch.long)  # following positions still on the target's path
            for k in range(m - 2, -1, -1):
                run[k] = run[k + 1] + 1 if agree[k] else 0
            feats.append(h[b, p - 1 : p + m - 1].half())
            nxt.append(own)
            left.append(run)
            seq.append(torch.full((m,), i))
    return dict(feats=torch.cat(feats), nxt=torch.cat(nxt), left=torch.cat(left), seq=torch.cat(seq))


@torch.no_grad()
def prompt_states(target, processor, rows) -> dict:
    """The target's last hidden states over each conversation's prompt (image positions and
    question), as the engine's prefill hands them to a drafter: prompt [N, P, C] fp16, right-
    padded, and prompt_len [N]. One forward over the prompts alone (causal: the rows are the
    prefill's, whatever follows)."""
    tok = processor.tokenizer
    prompts = [encode(tok, ex.question, None)[0] for _, _, ex in rows]
    pixels = processor.image_processor([ex.image for _, _, ex in rows], return_tensors="pt")["pixel_values"]
    width = max(map(len, prompts))
    out = torch.zeros(len(rows), width, target.get_output_embeddings().weight.shape[1], dtype=torch.float16)
    for start in range(0, len(rows), 32):
        idx = list(range(start, min(start + 32, len(rows))))
        batch = collate([(prompts[i], prompts[i]) for i in idx], tok.pad_token_id)
        h = target(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            pixel_values=pixels[idx],
            output_hidden_states=True,
        ).hidden_states[-1]
        for b, i in enumerate(idx):
            out[i, : len(prompts[i])] = h[b, : len(prompts[i])].half()
    return dict(prompt=out, prompt_len=torch.tensor([len(p) for p in prompts]))


def seen(model: heads.Speculator, data: dict, idx: torch.Tensor, per: int | None = None):
    """What a speculator with `look` reads at positions idx: its prompts' keys, values and masks
    (`Look.prepare`, once per conversation). With `per` (a `by_conversation` batch: runs of `per`
    positions of one conversation) one per run; else one per position. None without `look`."""
    if model.look is None:
        return None
    if per:
        seqs, which = data["seq"][idx[::per]], None
    else:
        seqs, which = data["seq"][idx].unique(return_inverse=True)
    rows = data["prompt"][seqs].float()  # [S, P, C]
    mask = torch.arange(rows.shape[1]) < data["prompt_len"][seqs][:, None]  # [S, P]
    keys, values = model.look.prepare(rows)
    return (keys, values, mask) if which is None else (keys[which], values[which], mask[which])


def _at(data: dict, idx: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows idx + k (clamped): features, next tokens, and whether they are still in idx's answer."""
    j = (idx + k).clamp(max=len(data["nxt"]) - 1)
    return data["feats"][j].float(), data["nxt"][j], data["left"][idx] >= k


def speculator_loss(
    model: heads.Speculator, E: torch.Tensor, data: dict, idx: torch.Tensor, distil: float = DISTIL
) -> torch.Tensor:
    f, _, _ = _at(data, idx, 0)
    s, loss, prompt = f, 0.0, seen(model, data, idx, PER)
    for k in range(UNROLL):
        _, token, _ = _at(data, idx, k)  # the token just sampled: j + 1 + k
        f_next, label, ok = _at(data, idx, k + 1)  # the target's f_{j+1+k} and its token j + 2 + k
        s = model.step(k, s, F.embedding(token, E), prompt)
        log_q = (s @ E.T).log_softmax(-1)
        ce = F.nll_loss(log_q, label, reduction="none")
        if distil:  # the target's whole distribution there, f_{j+1+k} @ E^T, not only its argmax
            ce = (1 - distil) * ce - distil * ((f_next @ E.T).softmax(-1) * log_q).sum(-1)
        loss = loss + (ce * ok).sum() / ok.sum().clamp(min=1)
        if model.shared:
            reg = F.smooth_l1_loss(s, f_next, reduction="none").mean(-1)
            loss = loss + 0.5 * (reg * ok).sum() / ok.sum().clamp(min=1)
    return loss / UNROLL


def medusa_loss(model: heads.MedusaHeads, E: torch.Tensor, data: dict, idx: torch.Tensor) -> torch.Tensor:
    g = model(_at(data, idx, 0)[0]) @ E.T  # [B, k, V]
    loss = 0.0
    for i in range(g.shape[1]):
        _, label, ok = _at(data, idx, i + 1)  # head i + 1: token j + 2 + i
        loss = loss + (F.cross_entropy(g[:, i], label, reduction="none") * ok).sum() / ok.sum().clamp(min=1)
    return loss / g.shape[1]


@torch.no_grad()
def held_out_chain(model, E: torch.Tensor, data: dict, idx: torch.Tensor, gamma: int = 4) -> float:
    """Mean leading drafts of a greedy gamma-chain equal to the target's tokens, over positions idx."""
    f, token, _ = _at(data, idx, 0)
    drafts = []
    if isinstance(model, heads.MedusaHeads):
        drafts = list((model(f) @ E.T).argmax(-1)[:, :gamma].T)
    else:
        s, x, prompt = f, token, seen(model, data, idx)
        E_rows = E if model.vocab is None else E[model.vocab]
        for k in range(gamma):
            s = model.step(k, s, F.embedding(x, E), prompt)
            x = heads.logits(s, E_rows, model.vocab, len(E)).argmax(-1)
            drafts.append(x)
    alive = torch.ones(len(idx), dtype=torch.bool)
    total = torch.zeros(len(idx))
    for k, d in enumerate(drafts):
        _, label, ok = _at(data, idx, k + 1)
        alive &= ok & (d == label)
        total += alive
    return float(total.mean())


def by_conversation(data: dict, train_idx: torch.Tensor, g: torch.Generator, per: int = PER):
    """A batch's positions: BATCH // per conversations, per positions each (a speculator with
    `look` prepares each conversation's prompt once per batch)."""
    seq = data["seq"][train_idx]
    order = train_idx[seq.argsort(stable=True)]
    seqs, counts = seq.unique(return_counts=True)
    starts = torch.cumsum(counts, 0) - counts

    def batch() -> torch.Tensor:
        pick = torch.randint(len(seqs), (BATCH // per,), generator=g)
        offset = (torch.rand(len(pick), per, generator=g) * counts[pick, None]).long()
        return order[(starts[pick, None] + offset).flatten()]

    return batch


def fit(model, loss_of, data: dict, train_idx: torch.Tensor, steps: int, lr: float, seed: int, probe=None) -> list:
    """AdamW, warm-up then cosine; every 500 steps (and the last) the loss and, given `probe`, its
    figure (the held-out chain) are logged, so a run's curve is in the log."""
    g = torch.Generator().manual_seed(seed)
    looks = getattr(model, "look", None) is not None
    batch = (
        by_conversation(data, train_idx, g)
        if looks
        else lambda: train_idx[torch.randint(len(train_idx), (BATCH,), generator=g)]
    )
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    curve = []
    for step in range(steps):
        for group in opt.param_groups:  # warm-up, then cosine
            group["lr"] = lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / steps))
        idx = batch()
        loss = loss_of(model, idx)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 500 == 0 or step == steps - 1:
            point = [step, round(loss.item(), 4)] + ([round(probe(model), 3)] if probe else [])
            curve.append(point)
            print(f"  step, loss{', held-out chain' if probe else ''}: {point}", flush=True)
    return curve


def main() -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS, help="the speculator's training steps")
    parser.add_argument("--medusa-steps", type=int, default=MEDUSA_STEPS)
    parser.add_argument("--compare", action="store_true", help="also train the multi-stage MLP form (its table)")
    parser.add_argument("--distil", type=float, default=DISTIL, help="the token loss's share on the whole distribution")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--scale", type=float, default=1.0, help="conversations per task, times this")
    parser.add_argument("--data", type=Path, default=None, help="cache the target's data here (reused if present)")
    parser.add_argument(
        "--inner", type=float, default=INNER, help="the speculator's inner width, times the hidden size"
    )
    parser.add_argument(
        "--look", type=int, default=LOOK, help="the speculator's heads of attention over the prompt (0: none)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    target = AutoModelForImageTextToText.from_pretrained(OUT / "target").float().eval()
    processor = AutoProcessor.from_pretrained(OUT / "target")
    if args.data is not None and args.data.exists():
        data = torch.load(args.data)
    else:
        data = target_data(target, processor, conversations(args.seed, args.scale))
        if args.data is not None:
            torch.save(data, args.data)
    if "prompt" not in data:  # a cache made before `look`: the prompts' states, once
        data |= prompt_states(target, processor, conversations(args.seed, args.scale))
        if args.data is not None:
            torch.save(data, args.data)
    E = target.get_output_embeddings().weight.detach().float()  # [V, C], tied to the input embedding
    hidden = E.shape[1]
    n_seq = int(data["seq"].max()) + 1
    held = data["seq"] % 10 == 9  # every tenth conversation, of every language and task
    train_idx, test_idx = (~held).nonzero()[:, 0], held.nonzero()[:, 0]
    log = dict(
        conversations=n_seq,
        positions=len(data["nxt"]),
        data_seconds=round(time.time() - t0, 1),
        steps=args.steps,
        medusa_steps=args.medusa_steps,
        distil=args.distil,
    )
    print(f"data: {log}", flush=True)
    shapes = {  # each built after its seed is set: its initial weights are the seed's, whatever ran before
        f"eagle-style (shared, 1 stage{f', looks at the prompt: {args.look} heads' if args.look else ''})": lambda: (
            heads.Speculator(hidden, round(args.inner * hidden), UNROLL, shared=True, look=args.look)
        )
    }
    if args.compare:
        shapes["eagle-style (shared, 1 stage)"] = lambda: heads.Speculator(hidden, 2 * hidden, UNROLL, shared=True)
        shapes["mlp speculator (4 stages)"] = lambda: heads.Speculator(hidden, hidden, UNROLL, shared=False)
    forms, results = {}, {}
    for i, (name, shape) in enumerate(shapes.items()):
        torch.manual_seed(args.seed + i)
        forms[name] = model = shape()
        t = time.time()
        curve = fit(
            model,
            lambda m, idx: speculator_loss(m, E, data, idx, args.distil),
            data,
            train_idx,
            args.steps,
            2e-3,
            args.seed + i,
            probe=lambda m: held_out_chain(m, E, data, test_idx),
        )
        model.restrict(data["nxt"][train_idx])  # it drafts only the ids the target wrote in training
        results[name] = dict(
            params=sum(p.numel() for p in model.parameters()),
            seconds=round(time.time() - t, 1),
            chain4=held_out_chain(model, E, data, test_idx),
            curve=curve,
        )
        print(f"{name}: {results[name]}", flush=True)
    best = max(forms, key=lambda k: results[k]["chain4"])
    args.out.mkdir(parents=True, exist_ok=True)
    heads.save(forms[best], args.out / "drafter-feature.safetensors", dict(form=best, chain4=results[best]["chain4"]))
    if args.medusa_steps:  # 0: the heads are left as they are (e.g. retraining the speculator alone)
        torch.manual_seed(args.seed + 7)
        medusa = heads.MedusaHeads(hidden, MEDUSA_HEADS)
        t = time.time()
        curve = fit(
            medusa, lambda m, idx: medusa_loss(m, E, data, idx), data, train_idx, args.medusa_steps, 2e-3, 7 + args.seed
        )
        results["medusa"] = dict(
            params=sum(p.numel() for p in medusa.parameters()),
            seconds=round(time.time() - t, 1),
            chain4=held_out_chain(medusa, E, data, test_idx),
            curve=curve,
        )
        print(f"medusa: {results['medusa']}", flush=True)
        heads.save(medusa, args.out / "drafter-medusa.safetensors", dict(chain4=results["medusa"]["chain4"]))
    log |= dict(forms=results, shipped_feature=best, total_seconds=round(time.time() - t0, 1))
    (args.out / "heads_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(json.dumps(log, indent=1))


if __name__ == "__main__":
    main()
