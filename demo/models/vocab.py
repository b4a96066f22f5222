"""What a preset's token ids mean: the ids that end an answer, the ids that stand for the image,
whether a drafter's ids mean what the target's mean, and a question kept from spelling control tokens.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

from demo.engine.detokenize import END_OF_TURN


class VocabMismatch(ValueError):
    """A drafter whose token ids do not mean what the target's ids mean."""


def stop_ids_of(tokenizer, model) -> frozenset[int]:
    """EOS ids from the generation config and tokenizer, plus the chat template's end of turn."""
    ids = set()
    eos = model.generation_config.eos_token_id
    ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    return frozenset(ids)


def check_vocab_compatible(target_tokenizer, drafter_tokenizer, drafter_name: str) -> None:
    """Refuse (VocabMismatch) a drafter whose shared ids spell different tokens than the target's
    (vocabularies compared, not embedding sizes: those are often padded)."""
    target_vocab = {i: t for t, i in target_tokenizer.get_vocab().items()}
    drafter_vocab = {i: t for t, i in drafter_tokenizer.get_vocab().items()}
    for i in sorted(target_vocab.keys() & drafter_vocab.keys()):
        if target_vocab[i] != drafter_vocab[i]:
            raise VocabMismatch(
                f"drafter {drafter_name!r} cannot assist this target: token id {i} is "
                f"{drafter_vocab[i]!r} for the drafter but {target_vocab[i]!r} for the target"
            )


def image_placeholder_ids(processor, names: tuple[str, ...] = ()) -> frozenset[int]:
    """Ids that stand for image content in the target's prompt (the processor's image token and the
    family's structure tokens, `names`): no drafter reads or proposes them."""
    tokenizer = processor.tokenizer
    candidates = {getattr(processor, "image_token", None), getattr(tokenizer, "image_token", None), *names}
    vocab = tokenizer.get_vocab()
    return frozenset(vocab[n] for n in candidates if n and n in vocab)


WORD_JOINER = "\u2060"  # invisible, and no tokenizer here has an added token containing it


def as_text(question: str, tokenizer) -> str:
    """The question with every added-token string in it (<|end|>, <|user|>, <image>, <pad>...)
    broken by a word joiner before its last character, so that the tokenizer reads it as the
    characters typed, never as the control token: a question cannot end its turn, write the
    assistant's, or add an image placeholder. A question without such strings is unchanged."""
    names = sorted(
        {t.content for t in tokenizer.added_tokens_decoder.values() if len(t.content) > 1}, key=len, reverse=True
    )
    for name in names:
        if name in question:
            question = question.replace(name, name[:-1] + WORD_JOINER + name[-1])
    return question
