"""Layer-skip self-drafting ("layer-skip"): the target drafts for itself with some decoder layers
skipped (Draft & Verify, Zhang et al. 2023).

The drafter is the target's own model, the very modules, no copy: its token embeddings, the
decoder layers it keeps, the final norm and the output head. It sees the image as the target
does: its prefill merges the image features into the prompt's embeddings with LLaVA's own
`get_image_features` and placeholder mask (`embed_prompt`), then runs its layers over them. Later
steps are text. Which layers it skips is chosen per preset by a search on training-split prompts
(`demo.lab.bench.layerskip_search`) and stored in `Preset.skip_layers`.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from demo.engine.compat import cache_keyword
from demo.engine.drafters import Drafter, DraftState


def unsupported(model) -> str | None:
    """Why layer-skip cannot draft for this target, or None when it can."""
    if getattr(model.config, "model_type", None) != "llava":
        return f"layer-skip drafting covers LLaVA targets only, not {model.config.model_type!r}"
    decoder = getattr(model.model, "language_model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if decoder is None or not all(hasattr(decoder, a) for a in needed):
        return "layer-skip drafting needs a Llama-style language model (embeddings, layers, norm, rotary)"
    return None


def embed_prompt(model, inputs: dict) -> torch.Tensor:
    """The prompt's input embeddings [1, L, C] with the image features in place of its
    placeholders, as LlavaModel.forward merges them before its language model."""
    inner = model.model
    embeds = inner.get_input_embeddings()(inputs["input_ids"])
    if inputs.get("pixel_values") is None:
        return embeds
    extra = {"image_sizes": inputs["image_sizes"]} if inputs.get("image_sizes") is not None else {}
    out = inner.get_image_features(pixel_values=inputs["pixel_values"], return_dict=True, **extra)
    features = getattr(out, "pooler_output", out)
    if isinstance(features, (list, tuple)):
        features = torch.cat(list(features), dim=0)
    features = features.to(embeds.device, embeds.dtype)
    mask = inner.get_placeholder_mask(inputs["input_ids"], inputs_embeds=embeds, image_features=features)
    return embeds.masked_scatter(mask, features)


class LayerSkipDrafter(Drafter):
    """The target's model drafting with the decoder layers in `skip` left out."""

    def __init__(self, model, *, skip: tuple[int, ...], **kwargs):
        super().__init__(model, kind="self", **kwargs)
        self.decoder = model.model.language_model
        n_layers = len(self.decoder.layers)
        if any(not 0 <= i < n_layers for i in skip):
            raise ValueError(f"layers to skip {skip} are not all among the target's {n_layers} layers")
        self.skip = tuple(sorted(set(skip)))
        self.keep = tuple(i for i in range(n_layers) if i not in self.skip)
        self.head = model.get_output_embeddings()
        skipped = sum(p.numel() for i in self.skip for p in self.decoder.layers[i].parameters())
        self.n_params = self.n_params - skipped
        self.layer_cache_kw = cache_keyword(self.decoder.layers[0])

    def run(self, embeds: torch.Tensor, cache: DynamicCache, start: int, every: bool = False) -> torch.Tensor:
        """The kept layers over embeds [1, n, C] at positions start.. (the cache holds start
        tokens) -> the logits for the token after the last: [V] (every: after each, [n, V])."""
        n = embeds.shape[1]
        positions = torch.arange(start, start + n, device=embeds.device)[None]  # [1, n]
        rope = self.decoder.rotary_emb(embeds, positions)
        mask = None  # one token attends to everything cached; several, causally:
        if n > 1:
            allowed = torch.ones(n, start + n, dtype=torch.bool, device=embeds.device).tril(start)
            mask = torch.zeros(n, start + n, dtype=embeds.dtype, device=embeds.device)
            mask = mask.masked_fill(~allowed, torch.finfo(embeds.dtype).min)[None, None]  # [1, 1, n, start + n]
        h = embeds
        for i in self.keep:
            h = self.decoder.layers[i](
                h,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                position_embeddings=rope,
                **{self.layer_cache_kw: cache},
            )
        logits = self.head(self.decoder.norm(h if every else h[:, -1:]))[0]  # [n or 1, V]
        return logits if every else logits[-1]

    @torch.inference_mode()
    def start(self, inputs: dict) -> DraftState:
        """A new run's state: the target's own prompt (image included) through the kept layers."""
        state = LayerSkipState(self, DynamicCache(config=self.model.config), int(inputs["input_ids"][0, -1]))
        self.run(embed_prompt(self.model, inputs), state.cache, 0)
        return state


class LayerSkipState(DraftState):
    """One run's layer-skip drafting: DraftState's bookkeeping over its own partial cache."""

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [n] (long, on the device) -> the logits for the token after them: [V]."""
        d = self.drafter
        start = self.cache.get_seq_length(d.keep[0]) if d.keep else 0
        embeds = d.decoder.embed_tokens(ids[None])  # [1, n, C]
        return d.run(embeds, self.cache, start)
