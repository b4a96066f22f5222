"""demo.session.validate on its own: every kind of bad input is refused with its message, and every image
mode becomes the exact RGB pixels it should. Files are built with PIL (or by hand, for headers
that claim more pixels than the file holds) in temporary folders; no model is involved."""

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile

from demo import session
from demo.models.presets import DrafterSpec, Preset
from demo.session import validate
from demo.session.validate import InvalidInput

pytestmark = pytest.mark.fast  # the fast tier (`pytest -m fast`): pure functions and tiny models, milliseconds each

PRESETS = {
    "p": Preset("p", "target", (DrafterSpec("text-only", "text-only", "d"), DrafterSpec("aware", "image-aware", "d")))
}
VALID = session.DEFAULTS | dict(question="What is this?", preset="p", drafter="text-only", max_new_tokens=64)


def parse(**change):
    return session.parse(**{**VALID, **change}, known=PRESETS)


# --- settings ---------------------------------------------------------------------------------


def test_a_valid_request_keeps_its_values_and_settings_record_them():
    request = parse(question="  What is this?\n", greedy=False, seed=2**32 - 1, gamma=4.0, min_confidence=0.5)
    assert request.question == "What is this?"
    assert request.gamma == 4 and isinstance(request.gamma, int)
    assert request.settings() == {
        "question": "What is this?",
        "preset": "p",
        "drafter": "text-only",
        "gamma": 4,
        "sampling": {"greedy": False, "temperature": 0.8, "top_k": 0, "top_p": 0.95, "seed": 2**32 - 1},
        "max_new_tokens": 64,
        "min_confidence": 0.5,
        "second_drafter": None,
        "lanes": {"speculative": "text-only", "autoregressive": None},
    }


@pytest.mark.parametrize(
    "change, message",
    [
        ({"question": ""}, "Ask a question about the image first."),
        ({"question": " \n\t "}, "Ask a question about the image first."),
        ({"question": None}, "Ask a question about the image first."),
        ({"question": 42}, "The question must be text; got 42."),
        ({"question": "x" * 4001}, "The question is 4,001 characters long; the limit is 4,000. Shorten it."),
        ({"preset": "org/any-model"}, "Unknown model preset: 'org/any-model'. Choose one of: p."),
        ({"preset": "/etc"}, "Unknown model preset: '/etc'. Choose one of: p."),
        ({"preset": None}, "Unknown model preset: None. Choose one of: p."),
        (
            {"drafter": "other"},
            "Unknown drafter for preset 'p': 'other'. Choose one of: text-only, text-only+tree, aware, aware+tree, prompt-lookup, staged.",
        ),
        ({"gamma": 0}, "gamma (drafts per round) must be a whole number from 1 to 10; got 0."),
        ({"gamma": 11}, "gamma (drafts per round) must be a whole number from 1 to 10; got 11."),
        ({"gamma": 2.5}, "gamma (drafts per round) must be a whole number from 1 to 10; got 2.5."),
        ({"gamma": "4"}, "gamma (drafts per round) must be a whole number from 1 to 10; got '4'."),
        ({"gamma": True}, "gamma (drafts per round) must be a whole number from 1 to 10; got True."),
        ({"gamma": float("nan")}, "gamma (drafts per round) must be a whole number from 1 to 10; got nan."),
        ({"gamma": [4]}, "gamma (drafts per round) must be a whole number from 1 to 10; got [4]."),
        ({"max_new_tokens": 513}, "max new tokens must be a whole number from 1 to 512; got 513."),
        ({"max_new_tokens": float("inf")}, "max new tokens must be a whole number from 1 to 512; got inf."),
        ({"greedy": "yes"}, "greedy must be true or false; got 'yes'."),
        ({"temperature": 0}, "temperature must be a number in [0.01, 5]; got 0."),
        ({"temperature": 1e-39}, "temperature must be a number in [0.01, 5]; got 1e-39."),
        ({"temperature": 0.0099}, "temperature must be a number in [0.01, 5]; got 0.0099."),
        ({"temperature": 5.01}, "temperature must be a number in [0.01, 5]; got 5.01."),
        ({"temperature": None}, "temperature must be a number in [0.01, 5]; got None."),
        ({"top_p": 0.0}, "top-p must be a number in (0, 1]; got 0.0."),
        ({"top_p": 1.5}, "top-p must be a number in (0, 1]; got 1.5."),
        ({"top_p": float("-inf")}, "top-p must be a number in (0, 1]; got -inf."),
        ({"seed": -1}, "seed must be a whole number from 0 to 4294967295; got -1."),
        ({"seed": 2**32}, "seed must be a whole number from 0 to 4294967295; got 4294967296."),
        ({"seed": {"a": 1}}, "seed must be a whole number from 0 to 4294967295; got {'a': 1}."),
        (
            {"min_confidence": 1.5},
            "threshold (stop drafting below this drafter confidence; min_confidence on /trace; 0 = off) must be a number in [0, 1]; got 1.5.",
        ),
    ],
)
def test_bad_settings_are_refused_with_the_valid_range(change, message):
    with pytest.raises(InvalidInput) as refused:
        parse(**change)
    assert str(refused.value) == message


def test_the_warp_stays_finite_at_the_smallest_temperature_accepted():
    from demo.engine.sampling import Sampling, warp

    most = float(torch.finfo(torch.float16).max)  # a half-precision model's largest logits, either sign
    logits = torch.tensor([[most, -most, 0.0, most / 2], [1e-3, 0.0, -1e-3, 2e-3]])
    low = parse(greedy=False, temperature=validate.MIN_TEMPERATURE, top_p=1.0).sampling
    assert low.temperature == 0.01
    for top_p in (1.0, 0.95):
        probs = warp(logits, Sampling(greedy=False, temperature=low.temperature, top_p=top_p))
        assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(2))
    assert probs[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    below = warp(logits, Sampling(greedy=False, temperature=1e-39, top_p=1.0))  # what the floor keeps out
    assert not torch.isfinite(below).all()


def test_a_lone_surrogate_in_the_question_is_refused_with_its_position():
    with pytest.raises(InvalidInput) as refused:
        parse(question="Why \ud800?")
    assert str(refused.value) == (
        "The question holds an invalid character at position 5 (a lone UTF-16 surrogate, 0xd800). "
        "Send the question as UTF-8 text."
    )
    assert parse(question="Why \U0001f600?").question == "Why \U0001f600?"  # a whole pair is text


def test_long_values_are_shortened_in_messages():
    with pytest.raises(InvalidInput) as refused:
        parse(preset="a" * 1000)
    assert str(refused.value) == f"Unknown model preset: '{'a' * 36}.... Choose one of: p."


def test_prompt_and_answer_must_fit_each_models_context():
    validate.check_context({"target": 40, "drafter": 30}, {"target": 512, "drafter": 512}, 472)  # exactly full
    with pytest.raises(InvalidInput) as refused:
        validate.check_context({"target": 40, "drafter": 30}, {"target": 512, "drafter": 512}, 473)
    assert str(refused.value) == (
        "Too long for the target: the question and image take 40 tokens and up to 473 new tokens were asked for, "
        "513 in all, but its context holds 512. To fit, lower max new tokens to 472 or less, or shorten the question."
    )
    with pytest.raises(InvalidInput, match="Too long for the drafter: .* To fit, shorten the question.$"):
        validate.check_context({"target": 40, "drafter": 600}, {"target": 4096, "drafter": 512}, 8)
    validate.check_context({"target": 10_000}, {"target": None}, 512)  # an unknown window is not checked


def test_context_window_is_the_text_models_for_multimodal_configs():
    from transformers import LlamaConfig, LlavaConfig

    assert validate.context_window(LlamaConfig(max_position_embeddings=2048)) == 2048
    assert validate.context_window(LlavaConfig(text_config=LlamaConfig(max_position_embeddings=4096))) == 4096


# --- where an image may come from ---------------------------------------------------------------


def test_only_files_inside_the_upload_folder_are_read(tmp_path):
    uploads = tmp_path / "uploads"
    (uploads / "abc").mkdir(parents=True)
    inside = uploads / "abc" / "a.png"
    inside.write_bytes(b"x")
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"x")
    (uploads / "link.png").symlink_to(outside)
    assert validate.image_path(None, uploads) is None
    assert validate.image_path({"path": str(inside), "meta": {"_type": "gradio.FileData"}}, uploads) == inside
    assert validate.image_path(str(inside), uploads) == inside
    for payload in (
        {"path": str(outside)},
        str(outside),
        str(uploads / "abc" / ".." / ".." / "secret.png"),
        str(uploads / "link.png"),  # a link out of the folder
        "/etc/passwd",
        {"path": None, "url": "http://127.0.0.1/a.png"},
        {"url": "data:image/png;base64,iVBORw0KGgo="},
        str(uploads / "abc" / "missing.png"),
        str(uploads),  # a folder
        "",
        42,
        ["a.png"],
    ):
        with pytest.raises(InvalidInput, match="must be a file uploaded with the request"):
            validate.image_path(payload, uploads)


# --- decoding and converting images -----------------------------------------------------------


def saved(tmp_path: Path, image: Image.Image, name: str, **options) -> Path:
    path = tmp_path / name
    image.save(path, **options)
    return path


def pixels(image: Image.Image) -> list:
    return list(image.get_flattened_data())


def row(mode: str, values: list) -> Image.Image:
    """A one-row image of `mode` whose pixels are `values`, left to right."""
    image = Image.new(mode, (len(values), 1))
    for x, value in enumerate(values):
        image.putpixel((x, 0), value)
    return image


def test_rgb_passes_unchanged(tmp_path):
    image = row("RGB", [(10, 20, 30), (200, 100, 0)])
    rgb, notes = validate.open_image(saved(tmp_path, image, "a.png"))
    assert rgb.mode == "RGB" and pixels(rgb) == [(10, 20, 30), (200, 100, 0)] and notes == []


def test_animated_gif_uses_its_first_frame(tmp_path):
    frames = [Image.new("RGB", (4, 4), colour) for colour in ((255, 0, 0), (0, 0, 255), (0, 255, 0))]
    path = saved(tmp_path, frames[0], "a.gif", save_all=True, append_images=frames[1:], duration=100)
    rgb, notes = validate.open_image(path)
    assert set(pixels(rgb)) == {(255, 0, 0)}
    assert notes == ["The GIF is animated; its first frame is used."]


def test_transparency_is_composited_on_white(tmp_path):
    rgba = row("RGBA", [(255, 0, 0, 128), (0, 0, 255, 0), (0, 255, 0, 255)])
    rgb, notes = validate.open_image(saved(tmp_path, rgba, "a.png"))
    # over white: c * a/255 + 255 * (1 - a/255), per channel
    assert pixels(rgb) == [(255, 127, 127), (255, 255, 255), (0, 255, 0)]
    assert notes == ["The image has transparent areas; they are shown on white."]
    la, _ = validate.open_image(saved(tmp_path, Image.new("LA", (1, 1), (100, 128)), "la.png"))
    assert pixels(la) == [(177, 177, 177)]  # 100 * 128/255 + 255 * 127/255 = 177.2


def test_palette_with_a_transparent_index_shows_white_there(tmp_path):
    p = Image.new("P", (2, 1))
    p.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    p.putpixel((1, 0), 1)
    path = saved(tmp_path, p, "p.png", transparency=0)
    rgb, _ = validate.open_image(path)
    assert pixels(rgb) == [(255, 255, 255), (0, 0, 255)]
    opaque, notes = validate.open_image(saved(tmp_path, p, "opaque.png"))
    assert pixels(opaque) == [(255, 0, 0), (0, 0, 255)] and notes == []


def test_grayscale_and_one_bit_become_grey_rgb(tmp_path):
    grey = row("L", [77, 255])
    assert pixels(validate.open_image(saved(tmp_path, grey, "l.png"))[0]) == [(77, 77, 77), (255, 255, 255)]
    bits = row("1", [0, 1])
    assert pixels(validate.open_image(saved(tmp_path, bits, "1.png"))[0]) == [(0, 0, 0), (255, 255, 255)]


def test_cmyk_becomes_rgb(tmp_path):
    cmyk = row("CMYK", [(255, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 255)])
    rgb, _ = validate.open_image(saved(tmp_path, cmyk, "c.tif"))
    assert pixels(rgb) == [(0, 255, 255), (255, 255, 255), (0, 0, 0)]
    jpeg, _ = validate.open_image(saved(tmp_path, Image.new("CMYK", (8, 8), (0, 255, 0, 0)), "c.jpg", quality=100))
    assert jpeg.mode == "RGB" and np.abs(np.asarray(jpeg).astype(int) - (255, 0, 255)).max() <= 2


@pytest.mark.parametrize("fmt, name", [("<u2", "le.png"), (">u2", "be.tif")])
def test_sixteen_bit_images_are_scaled_to_eight_bits_not_clipped(tmp_path, fmt, name):
    values = np.array([[0, 257, 300, 32896, 65535]], dtype=fmt)  # /257 -> 0, 1, 1.17, 128, 255
    mode = "I;16" if fmt == "<u2" else "I;16B"
    path = saved(tmp_path, Image.frombytes(mode, (5, 1), values.tobytes()), name)
    assert Image.open(path).mode.startswith("I;16")
    rgb, _ = validate.open_image(path)
    assert [r for r, g, b in pixels(rgb)] == [0, 1, 1, 128, 255]


def test_exif_orientation_is_applied(tmp_path):
    image = Image.new("RGB", (2, 1), (255, 0, 0))
    image.putpixel((1, 0), (0, 0, 255))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    rgb, _ = validate.open_image(saved(tmp_path, image, "o.png", exif=exif))
    assert rgb.size == (1, 2) and pixels(rgb) == [(255, 0, 0), (0, 0, 255)]


def png_bytes(width: int, height: int, rows: bytes = b"") -> bytes:
    """A grayscale 8-bit PNG with this header; `rows` is the raw image data (filter bytes
    included), compressed into its IDAT; empty rows make a header-only, truncated file."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


@pytest.fixture
def no_decoding(monkeypatch):
    """Fail the test if any image is decoded: refusals must come from the header alone."""

    def decode(self):
        raise AssertionError("the image was decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", decode)


@pytest.mark.parametrize(
    "width, height, message",
    [
        (20_000, 20_000, "The image is too large to decode safely; the limit is 16,777,216 pixels (4,096 x 4,096)."),
        (10_000, 10_000, "The image is too large to decode safely; the limit is 16,777,216 pixels (4,096 x 4,096)."),
        (4097, 4096, "The image is 4,097 x 4,096 pixels (16,781,312 in all); the limit is 16,777,216 pixels"),
        (4000, 100, "The image is 4000 x 100 pixels; its longer side may be at most 20 times its shorter side."),
    ],
)
def test_images_too_large_or_too_narrow_are_refused_from_the_header(tmp_path, no_decoding, width, height, message):
    path = tmp_path / "big.png"
    path.write_bytes(png_bytes(width, height))
    with pytest.raises(InvalidInput) as refused:
        validate.open_image(path)
    assert str(refused.value).startswith(message)


def test_a_decompression_bomb_is_refused_before_decoding(tmp_path, no_decoding):
    side = 6000  # 36 megapixels of zeros: 36 MB when decoded, a few kB on disk
    path = tmp_path / "bomb.png"
    path.write_bytes(png_bytes(side, side, b"\x00" * ((side + 1) * side)))
    assert path.stat().st_size < 100_000
    with pytest.raises(InvalidInput, match=r"^The image is 6,000 x 6,000 pixels \(36,000,000 in all\)"):
        validate.open_image(path)


def test_the_largest_allowed_image_decodes(tmp_path):
    path = saved(tmp_path, Image.new("L", (4096, 4096), 9), "max.png")
    rgb, _ = validate.open_image(path)
    assert rgb.size == (4096, 4096) and rgb.getpixel((4095, 4095)) == (9, 9, 9)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "That file is not an image this demo can read."),
        (b"hello, this is text\n" * 10, "That file is not an image this demo can read."),
        (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n", "That file is not an image this demo can read."),
        (png_bytes(64, 64), "The image file is damaged or truncated and cannot be decoded"),
        (png_bytes(64, 64, np.random.default_rng(0).bytes(65 * 64))[:2000], "The image file is damaged or truncated"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "That file is not an image this demo can read."),
    ],
    ids=["empty", "text", "eps", "no-pixel-data", "cut-short", "garbage-after-signature"],
)
def test_non_images_and_damaged_files_are_refused(tmp_path, content, message):
    path = tmp_path / "upload.png"
    path.write_bytes(content)
    with pytest.raises(InvalidInput, match="^" + message):
        validate.open_image(path)


def test_a_truncated_jpeg_is_refused(tmp_path):
    noise = Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    whole = saved(tmp_path, noise, "whole.jpg").read_bytes()
    path = tmp_path / "cut.jpg"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InvalidInput, match="^The image file is damaged or truncated and cannot be decoded"):
        validate.open_image(path)


def test_a_file_over_the_upload_limit_is_refused(tmp_path):
    path = tmp_path / "huge.png"
    path.write_bytes(b"\0" * (validate.MAX_FILE_BYTES + 1))
    with pytest.raises(InvalidInput, match=r"^The file is 10.0 MiB; the limit is 10 MiB.$"):
        validate.open_image(path)


def test_the_max_new_tokens_slider_offers_exactly_what_fits_the_embedded_context():
    from embedded import embedded

    from demo.models.presets import PRESETS
    from demo.page import layout

    loaded, most = embedded(), layout.max_new_offered("embedded")
    assert most == PRESETS["embedded"].max_new_tokens < validate.MAX_NEW_RANGE[1]
    image = Image.new("RGB", (48, 48))
    for drafter in ("text-only", "image-aware"):
        prompt = loaded.prompt(image, "a", drafter)  # the shortest prompt: the image and a one-word question
        tokens = {"target": prompt.target_inputs["input_ids"].shape[1]}
        tokens["drafter"] = prompt.drafter_inputs["input_ids"].shape[1]
        windows = {"target": validate.context_window(loaded.target.model.config)}
        windows["drafter"] = validate.context_window(loaded.drafter(drafter).model.config)
        validate.check_context(tokens, windows, most)  # the slider's top fits …
        with pytest.raises(InvalidInput, match="lower max new tokens to 495 or less"):
            validate.check_context(tokens, windows, most + 1)  # … and one more does not (the target's window)
    assert layout.max_new_offered("llava-1.5-7b") == validate.MAX_NEW_RANGE[1]  # 4,096 positions hold 512
