"""Incremental detokenisation: one text piece per token, correct across multi-token characters.

Byte-level tokenizers can split one character (an emoji, a CJK glyph) over several tokens, and
SentencePiece tokenizers drop a word's leading space when a token is decoded alone. Decoding
a short window that starts a few tokens back (as vLLM does) handles both: a piece is released
only once it no longer ends in an incomplete character, so the pieces always concatenate to
`tokenizer.decode(all_ids, skip_special_tokens=True)`. An answer the token limit cuts inside a
character ends on the last whole one: `flush` and `text` leave the incomplete bytes out, where the
tokenizer would write U+FFFD.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"
# How the presets' tokenizers spell the tokens that end an answer: the chat templates' end of turn
# (`demo.models.vocab.stop_ids_of` adds their ids to a model's stop ids) and the usual end-of-
# sequence tokens. The page draws each of them as its one "end" marker.
END_OF_TURN = ("<|end|>", "<|im_end|>", "<end_of_utterance>", "<|eot_id|>")
END_TOKENS = frozenset((*END_OF_TURN, "</s>", "<|endoftext|>", "<eos>"))


def piece_texts(tokenizer, ids: list[int]) -> tuple[str, ...]:
    """Each id's share of the text the ids decode to together, in whole characters: a character
    split over several ids is given to its last one ('' to the others), never as U+FFFD. The
    drafts of a round, in the exports and the inspector."""
    decoded = ["", *(tokenizer.decode(ids[: j + 1]).replace(REPLACEMENT, "") for j in range(len(ids)))]
    return tuple(after[len(before) :] for before, after in zip(decoded, decoded[1:]))


class Detokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # window start: decoding from here gives context for the next piece
        self.read = 0  # tokens whose text has already been released
        self.cut = False  # flush() found the answer ending inside a character and left those bytes out

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes ('' while a character is incomplete)."""
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix : self.read])
        after = self._decode(self.ids[self.prefix :])
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            self.prefix, self.read = self.read, len(self.ids)
            return after[len(before) :]
        return ""

    @property
    def text(self) -> str:
        """The whole answer so far (after `flush`, without a character the end cut)."""
        text = self._decode(self.ids)
        return text.rstrip(REPLACEMENT) if self.cut else text

    def flush(self) -> str:
        """Release whatever is held back at the end of the answer: the whole characters only, since
        held-back tokens end inside a character (the answer was cut there, e.g. by the token limit)."""
        before = self._decode(self.ids[self.prefix : self.read])
        after = self._decode(self.ids[self.prefix :])
        self.cut = after.endswith(REPLACEMENT) and self.read < len(self.ids)
        self.prefix = self.read = len(self.ids)
        piece = after[len(before) :]
        return piece.rstrip(REPLACEMENT) if self.cut else piece
