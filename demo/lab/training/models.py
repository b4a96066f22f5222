"""The three model architectures of the world, as plain transformers configs.

Contract: `build(kind, tokenizer)` returns a freshly initialised model of one kind:
- "target": LlavaForConditionalGeneration, CLIP tower (48 px, patch 16, 9 image tokens) +
  2-layer MLP projector + Llama LM (hidden 384, 6 layers).
- "drafter-text": LlamaForCausalLM (hidden 128, 2 layers); never sees the image.
- "drafter-image": a small LlavaForConditionalGeneration (CLIP hidden 64, 2 layers; the same LM
  shape as the text drafter, so it starts from the text drafter's weights).
Every vision tower feeds the LM its last layer (`vision_feature_layer=-1`), which is the layer
the per-cell attribute head pretrains. Nothing here knows about training.
"""

from dataclasses import dataclass

from transformers import (
    CLIPVisionConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
    PreTrainedTokenizerFast,
)

from demo.lab.training.tokenization import IMAGE_SEQ_LENGTH, IMAGE_SIZE, PATCH_SIZE


@dataclass(frozen=True)
class Shape:
    lm_hidden: int  # Llama hidden size
    lm_layers: int  # Llama decoder layers
    lm_heads: int  # attention heads (head dim = hidden / heads); no grouped KV
    lm_intermediate: int  # SwiGLU width
    tie_embeddings: bool  # share the input embedding with the LM head
    vision_hidden: int = 0  # CLIP hidden size; 0 = no vision tower (text-only model)
    vision_layers: int = 0
    vision_heads: int = 0


SHAPES = {
    "target": Shape(384, 6, 6, 1536, True, vision_hidden=192, vision_layers=3, vision_heads=3),
    "drafter-text": Shape(128, 2, 4, 512, True),
    "drafter-image": Shape(128, 2, 4, 512, True, vision_hidden=64, vision_layers=2, vision_heads=2),
}


def _text_config(s: Shape, tok: PreTrainedTokenizerFast) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=s.lm_hidden,
        intermediate_size=s.lm_intermediate,
        num_hidden_layers=s.lm_layers,
        num_attention_heads=s.lm_heads,
        num_key_value_heads=s.lm_heads,
        max_position_embeddings=512,
        tie_word_embeddings=s.tie_embeddings,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )


def build(kind: str, tok: PreTrainedTokenizerFast):
    s = SHAPES[kind]
    text = _text_config(s, tok)
    if not s.vision_hidden:
        model = LlamaForCausalLM(text)
    else:
        vision = CLIPVisionConfig(
            hidden_size=s.vision_hidden,
            intermediate_size=4 * s.vision_hidden,
            num_hidden_layers=s.vision_layers,
            num_attention_heads=s.vision_heads,
            image_size=IMAGE_SIZE,
            patch_size=PATCH_SIZE,
        )
        config = LlavaConfig(
            vision_config=vision,
            text_config=text,
            image_token_index=tok.convert_tokens_to_ids(tok.image_token),
            image_seq_length=IMAGE_SEQ_LENGTH,
            vision_feature_layer=-1,
            vision_feature_select_strategy="default",
            tie_word_embeddings=s.tie_embeddings,
        )
        config.eos_token_id = tok.eos_token_id
        config.pad_token_id = tok.pad_token_id
        model = LlavaForConditionalGeneration(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.do_sample = False
    model.generation_config.max_new_tokens = 200
    return model


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())
