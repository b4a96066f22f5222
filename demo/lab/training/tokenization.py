"""Tokenizer, chat template and processor of the world, built offline.

More, with its measurements: docs/modules.md.
"""

import json
from collections import Counter

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import CLIPImageProcessorPil, LlavaProcessor, PreTrainedTokenizerFast

VOCAB_SIZE = 512
IMAGE_SIZE = 48  # model input in pixels
PATCH_SIZE = 16  # 48 / 16 = 3, the scene grid
IMAGE_SEQ_LENGTH = (IMAGE_SIZE // PATCH_SIZE) ** 2  # image tokens per image (CLS is dropped)
SPECIAL_TOKENS = ("<unk>", "<pad>", "<image>", "<|user|>", "<|assistant|>", "<|end|>")
IMAGE_TOKEN, EOS_TOKEN = "<image>", "<|end|>"

# A message's content is a string or a list of {"type": "image"} / {"type": "text"} parts.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{ '<image>\\n' }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}"
)


def prompt_text(question: str) -> str:
    """The chat-templated prompt for one user turn (image first, then the question)."""
    return f"<|user|>\n<image>\n{question}<|end|>\n<|assistant|>\n"


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodes: any user text works
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return wrap(tok)


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """The world's Hugging Face tokenizer around a `tokenizers` BPE: specials, chat template."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token=EOS_TOKEN,
        extra_special_tokens={"image_token": IMAGE_TOKEN, "user_token": "<|user|>", "assistant_token": "<|assistant|>"},
        chat_template=CHAT_TEMPLATE,
        model_max_length=1024,
    )


def extend_tokenizer(
    tok: PreTrainedTokenizerFast, texts: list[str], new_tokens: int, keep: list[str]
) -> PreTrainedTokenizerFast:
    """`tok` with `new_tokens` more tokens learnt from `texts`: BPE's training, continued from
    how `tok` already splits each word of `texts`. A pair that stands side by side in how `tok`
    splits a word of `keep` is never merged, so every text of `keep` encodes as before."""
    backend = tok.backend_tokenizer
    words = Counter(w for text in texts for w, _ in backend.pre_tokenizer.pre_tokenize_str(text))
    split = {w: [t.value for t in backend.model.tokenize(w)] for w in words}
    frozen = set()  # the pairs side by side in `keep`'s words: merging one would change them
    for w in {w for text in keep for w, _ in backend.pre_tokenizer.pre_tokenize_str(text)}:
        pieces = [t.value for t in backend.model.tokenize(w)]
        frozen.update(zip(pieces, pieces[1:]))
    state = json.loads(backend.to_str())
    vocab, merges = dict(state["model"]["vocab"]), [tuple(m) for m in state["model"]["merges"]]
    while len(vocab) < len(tok) + new_tokens:
        pairs = Counter()
        for w, pieces in split.items():
            for pair in zip(pieces, pieces[1:]):
                if pair not in frozen:
                    pairs[pair] += words[w]
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))  # most frequent; ties by the pieces, for determinism
        merges.append(best)
        vocab.setdefault(best[0] + best[1], len(vocab))
        for w, pieces in split.items():
            if best[0] in pieces:
                split[w] = _merged(pieces, best)
    state["model"]["vocab"], state["model"]["merges"] = vocab, [list(m) for m in merges]
    return wrap(Tokenizer.from_str(json.dumps(state)))


def _merged(pieces: list[str], pair: tuple[str, str]) -> list[str]:
    out, k = [], 0
    while k < len(pieces):
        if k + 1 < len(pieces) and (pieces[k], pieces[k + 1]) == pair:
            out.append(pair[0] + pair[1])
            k += 2
        else:
            out.append(pieces[k])
            k += 1
    return out


def build_processor(tokenizer: PreTrainedTokenizerFast) -> LlavaProcessor:
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        image_token=IMAGE_TOKEN,
        chat_template=CHAT_TEMPLATE,
    )


def word_of_each_token(tok, ids: list[int]) -> list[str]:
    """For each token, the lower-case word it is a piece of ('' for punctuation and specials)."""
    pieces = [tok.decode([i]) for i in ids]
    groups: list[list[int]] = []
    for k, piece in enumerate(pieces):
        starts_word = not piece[:1].isalpha() or not pieces[k - 1][-1:].isalpha() if k else True
        if starts_word:
            groups.append([])
        groups[-1].append(k)
    out = [""] * len(ids)
    for group in groups:
        word = "".join(c for c in "".join(pieces[k] for k in group).lower() if c.isalpha())
        for k in group:
            out[k] = word
    return out
