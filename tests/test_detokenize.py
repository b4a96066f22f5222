"""Incremental detokenisation over byte-level and SentencePiece-style tokenizers."""

import pytest
import tiny
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from demo.engine.detokenize import Detokenizer

pytestmark = pytest.mark.fast  # the fast tier (`pytest -m fast`): pure functions and tiny models, milliseconds each

TEXTS = [
    "The image shows a red circle and a blue square.",
    "猫 🐱 café naïve",
    "🐱🐱 emoji and accents: é à ü",
    "  two leading spaces and\nnew lines\n\n",
]


def metaspace_tokenizer() -> PreTrainedTokenizerFast:
    """A SentencePiece-style tokenizer: '▁' marks word starts, and a lone token loses its space."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    alphabet = [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", *alphabet])
    tok.train_from_iterator(tiny.CORPUS * 3, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def pieces(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = Detokenizer(tokenizer)
    out = [detok.push(i) for i in ids]
    out[-1] += detok.flush()
    return ids, out


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("which", ["byte-level", "metaspace"])
def test_pieces_concatenate_to_the_decoded_text(text, which):
    tokenizer = tiny.tokenizer() if which == "byte-level" else metaspace_tokenizer()
    ids, out = pieces(tokenizer, text)
    assert "".join(out) == tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert all("\ufffd" not in piece for piece in out)


def test_a_character_split_over_byte_tokens_is_released_whole_by_its_last_token():
    tokenizer = tiny.tokenizer()
    ids, out = pieces(tokenizer, "🐱")
    assert len(ids) > 1  # the emoji is several byte tokens in this small vocabulary
    assert out == [""] * (len(ids) - 1) + ["🐱"]


def test_words_keep_their_leading_space_with_a_sentencepiece_decoder():
    tokenizer = metaspace_tokenizer()
    _, out = pieces(tokenizer, "a red circle")
    assert "".join(out) == "a red circle"
    assert any(piece.startswith(" ") for piece in out[1:])


def test_an_answer_cut_inside_a_character_ends_on_the_last_whole_one():
    tokenizer = tiny.tokenizer()
    ids = tokenizer.encode("a red 🐱🐱", add_special_tokens=False)
    assert tokenizer.decode(ids[:-1]).endswith("\ufffd")  # the cut leaves part of the emoji's bytes
    detok = Detokenizer(tokenizer)
    out = [detok.push(i) for i in ids[:-1]]  # the token limit cuts the second emoji before its last byte
    out.append(detok.flush())
    assert "".join(out) == "a red 🐱"
    assert detok.text == "a red 🐱"


def test_an_answer_that_ends_on_a_whole_character_is_released_as_decoded():
    tokenizer = tiny.tokenizer()
    ids = tokenizer.encode("猫 🐱", add_special_tokens=False)
    detok = Detokenizer(tokenizer)
    out = [detok.push(i) for i in ids]
    out.append(detok.flush())
    assert "".join(out) == detok.text == "猫 🐱"
