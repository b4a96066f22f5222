"""The target's new tokens, when stage 10 (`multilingual.py`) grows its vocabulary for German and
Chinese: where their embedding rows start, which rows learn, and the loss that keeps English as
it was while they do.

    grow_embeddings    a new token that translates a word starts from its English translation's
                       rows, any other from its pieces' rows; each plus its language's direction
                       (`token_language`, `quiet_directions`)
    new_rows_only      parameter groups in which, of the embeddings, only the new rows learn
    kept_english_loss  an English batch's loss is the KL divergence from the English target's
                       distribution, any other batch's the cross-entropy on its answer
More, with its measurements: docs/modules.md.
"""

import torch

from demo.lab.training.stage_tools import set_trainable
from demo.world import translation

# A translated word starts a little shorter than its English one: the embeddings are tied, so
# where the target would write " green" its logit stays the larger, and English answers are
# what they were (with equal rows, the first pilot's English answers took " grün" for " green").
TRANSLATED_SCALE = 0.9
# Every new token also starts with its language's own direction (`quiet_directions`): without it
# " rot" and "红色" both started as " red" and the target wrote Chinese words in German answers
# ("Die Form unten in der Mitte ist黄色."). The directions are ones the target's English hidden
# states barely use, so no new token outscores an English word in English: with random
# directions an English caption began "On一个 light background", and with directions pointing
# away from the hidden states' mean a new token was still the argmax at 2.3% of English answer
# positions (none with these).


@torch.no_grad()
def quiet_directions(target, batches) -> dict[str, torch.Tensor]:
    """For German and Chinese, a unit direction that what the target's LM head reads barely
    uses on the answers of English `batches` (encoded conversations with their images,
    `data.item_batch`): the eigenvectors of the least two eigenvalues of its second moment."""
    seen, vectors = [], []
    hook = target.lm_head.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    target.eval()
    try:
        for batch in batches:
            seen.clear()
            target(**{k: v for k, v in batch.items() if k not in ("scenes", "labels")})
            answer = torch.zeros_like(batch["labels"], dtype=torch.bool)
            answer[:, :-1] = batch["labels"][:, 1:] != -100  # the positions that predict an answer token
            vectors.append(seen[0][answer])
    finally:
        hook.remove()
        target.train()
    h = torch.cat(vectors).double()
    _, eigenvectors = torch.linalg.eigh(h.T @ h / len(h))  # ascending eigenvalues
    return {"de": eigenvectors[:, 0].float(), "zh": eigenvectors[:, 1].float()}


def token_language(text: str) -> str:
    """The language a new token of the grown tokenizer belongs to: "zh" for Han characters, the
    pieces of one (bytes that decode to no character) and full-width punctuation ("。", "："),
    "de" for the rest."""
    wide = ("\u4e00", "\u9fff"), ("\u3000", "\u303f"), ("\uff00", "\uffef"), ("\ufffd", "\ufffd")
    return "zh" if any(lo <= c <= hi for c in text for lo, hi in wide) else "de"


def grow_embeddings(
    model, old_tok, new_tok, lexicons: dict[str, str] | None = None, offset: float = 0.0, directions=None
) -> None:
    """Resize `model`'s (tied) embeddings to `new_tok`. A new token whose meaning `lexicons`
    gives (word -> English, `translation.lexicon`; `translation.gloss` reads a token of several
    Chinese words) starts as the mean of the old rows of its English translation's tokens
    (" Kreis" as " circle", "红色" as " red", "是什么颜色" as " is what colour"), times
    `TRANSLATED_SCALE`, so the lookup the target has writes it; any other new token as the mean
    of the old rows of the pieces the old tokenizer splits it into, so it starts where its text
    was. With `offset`, each new token gets its language's direction added (`token_language`;
    `directions[language]`, a unit vector, `quiet_directions`), times `offset` times the
    old rows' mean norm, so the target can tell the languages' words apart."""
    emb = model.get_input_embeddings().weight
    n_old = emb.shape[0]
    norm = emb.detach().norm(dim=1).mean()
    rows = []
    with torch.no_grad():
        for i in range(n_old, len(new_tok)):
            text = new_tok.decode([i])
            meaning = translation.gloss(text, lexicons) if lexicons else None
            if meaning:
                old = old_tok(" " + meaning, add_special_tokens=False)["input_ids"]
                row = TRANSLATED_SCALE * emb[old].mean(0)
            else:
                pieces = old_tok.backend_tokenizer.model.tokenize(new_tok.convert_ids_to_tokens(i))
                row = emb[[old_tok.convert_tokens_to_ids(p.value) for p in pieces]].mean(0)
            rows.append(row + offset * norm * directions[token_language(text)] if offset else row)
    model.resize_token_embeddings(len(new_tok), mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[n_old:] = torch.stack(rows)
    model.tie_weights()


def new_rows_only(target, n_old: int, embedding_scale: float) -> tuple[list[dict], object]:
    """Parameter groups for `fit`: the (tied) embeddings, of which only the rows past `n_old` learn
    (the old rows' gradient is zeroed, and they take no weight decay), at `embedding_scale` times
    the learning rate; and the projector and the LM's other weights at the learning rate. Returns
    the groups and the hook's handle (remove it after training)."""
    emb = target.get_input_embeddings().weight
    mask = torch.ones(emb.shape[0], 1)
    mask[:n_old] = 0.0
    handle = emb.register_hook(lambda grad: grad * mask)
    body = set_trainable(target, target.model.multi_modal_projector, target.model.language_model, target.lm_head)
    body = [p for p in body if p is not emb]
    groups = [{"params": [emb], "scale": embedding_scale, "weight_decay": 0.0}, {"params": body}]
    return groups, handle


def kept_english_loss(target, teacher, batch: dict, n_english: int) -> torch.Tensor:
    """A batch's loss that keeps English as the English target had it: a batch with no token past
    the English vocabulary (`n_english`) is English, and its loss is the KL divergence from the
    English target's (`teacher`'s) next-token distribution to the target's, on the answer
    tokens, so English answers stay what they were, word for word where the drafters learnt
    them; any other batch's loss is the cross-entropy on its answer."""
    if int(batch["input_ids"].max()) >= n_english:
        return target(**batch).loss
    labels = batch.pop("labels")
    logits = target(**batch).logits[:, :-1]
    with torch.no_grad():
        reference = teacher(**batch).logits[:, :-1].log_softmax(-1)
    answer = labels[:, 1:] != -100
    student = logits.log_softmax(-1)[answer]
    reference = reference[answer]
    kl = (reference.exp() * (reference - student[:, :n_english])).sum(-1)
    return kl.mean()
