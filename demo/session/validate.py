"""Input validation: every value a person or API caller sends is checked here before any work, and
returned clean or refused with `InvalidInput`, whose message names the value, the valid range and
what to do. Values are refused, never clamped; a request with no image is refused."""

from __future__ import annotations

import math
import os
import re
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

GAMMA_RANGE = (1, 10)
MAX_NEW_RANGE = (1, 512)
SEED_RANGE = (0, 2**32 - 1)
# The warp divides float32 logits by the temperature: at MIN_TEMPERATURE even a float16 model's
# largest logit (65,504) stays finite (at 1e-39 the probabilities were NaN).
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 5.0
MAX_QUESTION_CHARS = 4000  # checked before tokenising; the token count is checked against the context later
MAX_PIXELS = 4096 * 4096  # 16,777,216 pixels: width x height, read from the header before decoding
MAX_ASPECT = 20  # longest side / shortest side: processors scale the shortest side up
MAX_FILE_BYTES = 10 * 1024 * 1024  # the upload limit (Gradio enforces it at upload; checked again here)
FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF")  # never EPS & co, which run external code

NO_IMAGE = "Add an image first: upload one or pick an example. The models here answer questions about an image."


class InvalidInput(ValueError):
    """A value a person or caller sent that cannot be used; the message says why and what would do."""


# --- scalars ----------------------------------------------------------------------------------


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(name: str, value, low: int, high: int) -> int:
    """An integer in [low, high]; integral floats (4.0) pass, since JSON and sliders send them."""
    ok = _is_number(value) and math.isfinite(value) and float(value).is_integer() and low <= value <= high
    if not ok:
        raise InvalidInput(f"{name} must be a whole number from {low} to {high}; got {_shown(value)}.")
    return int(value)


def number(name: str, value, low: float, high: float, *, low_open: bool = False) -> float:
    """A finite number in [low, high], or (low, high] with low_open."""
    ok = _is_number(value) and math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise InvalidInput(f"{name} must be a number in {interval}; got {_shown(value)}.")
    return float(value)


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false; got {_shown(value)}.")
    return value


def sentence(reason: str) -> str:
    """A reason as a sentence: its first letter capitalised, a full stop at the end."""
    return reason[:1].upper() + reason[1:].rstrip(".") + "."


def choice(name: str, value, known) -> str:
    known = list(known)
    if not isinstance(value, str) or value not in known:
        raise InvalidInput(f"Unknown {name}: {_shown(value)}. Choose one of: {', '.join(known)}.")
    return value


def question(value) -> str:
    """The question, stripped; refused when empty or longer than MAX_QUESTION_CHARS."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidInput(f"The question must be text; got {_shown(value)}.")
    value = value.strip()
    if not value:
        raise InvalidInput("Ask a question about the image first.")
    bad = next((i for i, c in enumerate(value) if "\ud800" <= c <= "\udfff"), None)
    if bad is not None:  # half of a UTF-16 pair: not text any tokenizer can read
        raise InvalidInput(
            f"The question holds an invalid character at position {bad + 1} (a lone UTF-16 surrogate, "
            f"{ord(value[bad]):#06x}). Send the question as UTF-8 text."
        )
    if len(value) > MAX_QUESTION_CHARS:
        raise InvalidInput(
            f"The question is {len(value):,} characters long; the limit is {MAX_QUESTION_CHARS:,}. Shorten it."
        )
    return value


# --- the lanes -------------------------------------------------------------------------------

MAX_SPECULATIVE_LANES = 2  # a race: the autoregressive lane and at most this many speculative ones
NO_SECOND = (None, "", "none")  # what a request sends for "no second speculative lane"


def _drafter(name: str, value, offered, unusable: dict[str, str], preset: str) -> str:
    """One lane's drafter: a name the preset offers; one it cannot use is refused with the reason."""
    if isinstance(value, str) and value in unusable:
        raise InvalidInput(
            f"The drafter {value!r} cannot run on preset {preset!r}: {unusable[value]}. "
            f"Choose one of: {', '.join(offered)}."
        )
    return choice(f"{name} for preset {preset!r}", value, offered)


def lane_drafters(first, second, offered, unusable: dict[str, str], preset: str) -> tuple[str, ...]:
    """The drafters of a race's speculative lanes, in lane order: `first`, and `second` unless it
    is one of NO_SECOND; each one of `offered` (`unusable` says why the preset cannot use a name),
    the two different, and never more than MAX_SPECULATIVE_LANES."""
    offered = list(offered)
    extra = list(second) if isinstance(second, (list, tuple)) else [] if second in NO_SECOND else [second]
    if isinstance(second, (list, tuple)) and len(extra) < MAX_SPECULATIVE_LANES:  # [name] is not a name
        raise InvalidInput(
            f"The second drafter must be one drafter's name, not a list; got {_shown(second)}. "
            f"Choose one of: {', '.join(offered)}, or none."
        )
    if 1 + len(extra) > MAX_SPECULATIVE_LANES:
        names = ", ".join(_shown(v) for v in [first, *extra])
        raise InvalidInput(
            f"A race holds at most {MAX_SPECULATIVE_LANES} speculative lanes beside the autoregressive one; "
            f"got {1 + len(extra)} drafters ({names}). Pick one second drafter, or none."
        )
    drafters = (_drafter("drafter", first, offered, unusable, preset),)
    drafters += tuple(_drafter("second drafter", d, offered, unusable, preset) for d in extra)
    if len(drafters) == 2 and drafters[0] == drafters[1]:
        raise InvalidInput(
            f"The two speculative lanes would both draft with {drafters[0]!r}: a second lane must use another "
            "drafter (or none), or it would only repeat the first."
        )
    return drafters


# --- the image --------------------------------------------------------------------------------

NOT_UPLOADED = (
    "The image must be a file uploaded with the request (in Python: gradio_client.handle_file(path)); "
    "paths on the server and URLs are not accepted."
)


def unusable_path(error: Exception | None = None) -> str:
    """What a request is told when its image's path cannot even be resolved: a NUL byte (Python's
    `ValueError: embedded null byte`), or any other `ValueError` or `OSError` on the way."""
    if error is None or "null byte" in str(error):
        why = "it holds a NUL byte (\\x00), which no file name may hold"
    else:  # the error's reason, never the path it quotes (a server folder's, too)
        reason = f"[Errno {error.errno}] {error.strerror}" if isinstance(error, OSError) and error.strerror else ""
        detail = reason or re.sub(r"'[^']*'|\"[^\"]*\"|/\S*", "…", (str(error).splitlines() or ["no detail"])[0])[:80]
        why = f"it could not be resolved ({type(error).__name__}: {detail})"
    return f"The image's path cannot be used: {why}. {NOT_UPLOADED}"


def image_path(payload, uploads: str | Path) -> Path | None:
    """The path of an uploaded image, from a request's image value: None (no image), a Gradio file
    dict {"path": ...} or a path string. Only files inside `uploads` (Gradio's upload folder,
    where every upload lands) are accepted, after resolving links."""
    if payload is None:
        return None
    raw = payload.get("path") if isinstance(payload, dict) else payload
    if not isinstance(raw, (str, os.PathLike)) or not str(raw):
        raise InvalidInput(NOT_UPLOADED)
    if "\x00" in str(raw):
        raise InvalidInput(unusable_path())
    try:
        path = Path(raw).resolve()
        inside = path.is_relative_to(Path(uploads).resolve()) and path.is_file()
    except (ValueError, OSError, RuntimeError) as error:  # a name too long, a link loop (RuntimeError in 3.11)
        raise InvalidInput(unusable_path(error)) from error
    if not inside:
        raise InvalidInput(NOT_UPLOADED)
    return path


def _too_large(width: int, height: int) -> str:
    return (
        f"The image is {width:,} x {height:,} pixels ({width * height:,} in all); the limit is "
        f"{MAX_PIXELS:,} pixels (4,096 x 4,096). Scale it down and upload it again."
    )


def open_image(path: str | Path) -> tuple[Image.Image, list[str]]:
    """Decode an uploaded file into an RGB image, checking its size from the header first; returns
    the image and notes for the person (e.g. which GIF frame was used)."""
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise InvalidInput(f"The file is {size / 2**20:.1f} MiB; the limit is {MAX_FILE_BYTES / 2**20:.0f} MiB.")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(path, formats=FORMATS) as im:
                return _decode(im)
        except InvalidInput:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
            limit = f"{MAX_PIXELS:,} pixels (4,096 x 4,096)"
            raise InvalidInput(f"The image is too large to decode safely; the limit is {limit}.") from error
        except Image.UnidentifiedImageError as error:
            kinds = f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}"
            raise InvalidInput(f"That file is not an image this demo can read. Upload a {kinds} file.") from error
        except (OSError, ValueError, SyntaxError, EOFError, MemoryError) as error:  # what damaged files raise
            raise InvalidInput(
                f"The image file is damaged or truncated and cannot be decoded ({type(error).__name__})."
            ) from error


def _decode(im: Image.Image) -> tuple[Image.Image, list[str]]:
    """Check the header's size, then decode the first frame and convert it to RGB."""
    width, height = im.size
    if width * height > MAX_PIXELS:
        raise InvalidInput(_too_large(width, height))
    if width < 1 or height < 1 or max(width, height) > MAX_ASPECT * min(width, height):
        raise InvalidInput(
            f"The image is {width} x {height} pixels; its longer side may be at most {MAX_ASPECT} times its "
            "shorter side. Crop it and upload it again."
        )
    notes = []
    if getattr(im, "is_animated", False):
        im.seek(0)
        notes.append(f"The {im.format} is animated; its first frame is used.")
    im.load()
    try:
        im = ImageOps.exif_transpose(im)
    except Exception:  # a broken orientation tag: keep the pixels as stored
        pass
    rgb, transparent = to_rgb(im)
    if transparent:
        notes.append("The image has transparent areas; they are shown on white.")
    return rgb, notes


def _has_alpha(im: Image.Image) -> bool:
    return im.mode in ("RGBA", "RGBa", "LA", "La", "PA") or "transparency" in im.info


def _to_8bit(im: Image.Image) -> Image.Image:
    """A one-channel image of more than 8 bits ("I;16*", "I", "F") scaled, never clipped, into
    0..255 ("L"): 16-bit data (and 32-bit integers within 0..65535) from 0..65535, other data from
    their own min..max."""
    a = np.asarray(im).astype(np.float64)
    if im.mode.startswith("I;16") or (im.mode == "I" and a.size and a.min() >= 0 and a.max() <= 65535):
        low, high = 0.0, 65535.0
    else:
        finite = a[np.isfinite(a)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    scaled = (np.nan_to_num(a, nan=low) - low) * (255.0 / max(high - low, 1e-12))
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), "L")


def to_rgb(im: Image.Image) -> tuple[Image.Image, bool]:
    """Any decoded PIL image as RGB, and whether it had transparency (composited over white); more
    than 8 bits per channel is scaled to 8 (`_to_8bit`)."""
    if im.mode.startswith("I") or im.mode == "F":
        return _to_8bit(im).convert("RGB"), False
    if _has_alpha(im):
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB"), True
    try:
        return im.convert("RGB"), False
    except ValueError as error:
        raise InvalidInput(f"Images in colour mode {im.mode} are not supported; save it as RGB.") from error


# --- the prompt against the context -------------------------------------------------------------


def context_window(config) -> int | None:
    """The longest sequence a model config allows (its text model's, for a multimodal one)."""
    text = getattr(config, "text_config", None) or config
    return getattr(text, "max_position_embeddings", None)


def check_context(prompt_tokens: dict[str, int], windows: dict[str, int | None], max_new_tokens: int) -> None:
    """Refuse, with the numbers, when a model's prompt plus the new tokens exceeds its context
    (`prompt_tokens` and `windows` by model, "target" or "drafter"; a None window is unknown)."""
    for model, n_prompt in prompt_tokens.items():
        window = windows.get(model)
        if window is not None and n_prompt + max_new_tokens > window:
            room = window - n_prompt
            advice = (
                f"lower max new tokens to {room} or less, or shorten the question"
                if room >= 1
                else "shorten the question"
            )
            raise InvalidInput(
                f"Too long for the {model}: the question and image take {n_prompt} tokens and up to "
                f"{max_new_tokens} new tokens were asked for, {n_prompt + max_new_tokens} in all, but its context "
                f"holds {window}. To fit, {advice}."
            )
