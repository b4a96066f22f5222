"""Tokenizer, chat template and processor of the world, built offline.

Contract:
- `train_tokenizer(texts)` trains a byte-level BPE on the corpus with a vocabulary small
  enough that many words split into several pieces, and wraps it as a Hugging Face fast
  tokenizer with the chat template, `<|end|>` as EOS and `<image>` as the image token.
- `build_processor(tokenizer)` is the `LlavaProcessor` shipped with both LLaVA models: the
  display-resolution image is resized to 48 px and cut into 3x3 patches of 16 px, one image
  token per patch.
- `prompt_text(question)` is exactly what `apply_chat_template` renders for one user turn
  with an image, with the generation prompt: the form every model is trained on.
"""

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
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token=EOS_TOKEN,
        extra_special_tokens={"image_token": IMAGE_TOKEN, "user_token": "<|user|>", "assistant_token": "<|assistant|>"},
        chat_template=CHAT_TEMPLATE,
        model_max_length=1024,
    )


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
