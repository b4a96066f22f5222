"""Synthetic scenes: coloured shapes laid out on the vision tower's patch grid.

More, with its measurements: docs/modules.md.
"""

import functools
import hashlib
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageChops, ImageDraw

GRID = 3  # cells per side; equals image_size / patch_size of every vision tower in the world
DISPLAY_SIZE = 288  # default render size in pixels (96 px per cell)
SUPERSAMPLE = 2  # drawn at this multiple of the output size, then downsampled (anti-aliasing)

SHAPES = ("circle", "square", "triangle", "cross")
COLOURS = {
    "red": (214, 40, 46),
    "orange": (246, 138, 22),
    "yellow": (238, 204, 26),
    "green": (44, 163, 72),
    "blue": (42, 96, 214),
    "purple": (140, 64, 186),
}
SIZES = ("large", "small")
RADIUS = {"large": 0.40, "small": 0.25}  # shape radius as a fraction of the cell side
BACKGROUNDS = ((247, 247, 245), (235, 238, 243), (243, 239, 231), (233, 238, 233))
MAX_OBJECTS = 3
NOISE_VARIANTS = 16  # distinct background noise patterns

# Cell index (row * GRID + col) -> short position name, and the phrase used in sentences.
POSITIONS = (
    "top left",
    "top",
    "top right",
    "left",
    "centre",
    "right",
    "bottom left",
    "bottom",
    "bottom right",
)
POSITION_PHRASES = (
    "in the top left corner",
    "in the middle of the top row",
    "in the top right corner",
    "in the middle of the left side",
    "in the centre",
    "in the middle of the right side",
    "in the bottom left corner",
    "in the middle of the bottom row",
    "in the bottom right corner",
)


@dataclass(frozen=True)
class Obj:
    shape: str  # one of SHAPES
    colour: str  # a key of COLOURS
    size: str  # one of SIZES
    cell: int  # row * GRID + col
    dx: float = 0.0  # offset of the centre within the cell, as a fraction of the cell side
    dy: float = 0.0

    @property
    def position(self) -> str:
        return POSITIONS[self.cell]

    @property
    def position_phrase(self) -> str:
        return POSITION_PHRASES[self.cell]


@dataclass(frozen=True)
class Scene:
    objects: tuple[Obj, ...]  # sorted by cell (reading order)
    background: int = 0  # index into BACKGROUNDS
    noise_seed: int = 0  # seed of the mild pixel noise

    def signature(self) -> str:
        """The content that defines the scene for the split: what is where, not the jitter."""
        return ";".join(f"{o.cell}:{o.size}:{o.colour}:{o.shape}" for o in self.objects)


def sample_scene(rng: random.Random, max_objects: int = MAX_OBJECTS) -> Scene:
    n = rng.randint(1, max_objects)
    cells = sorted(rng.sample(range(GRID * GRID), n))
    objects = tuple(
        Obj(
            shape=rng.choice(SHAPES),
            colour=rng.choice(list(COLOURS)),
            size=rng.choice(SIZES),
            cell=cell,
            dx=rng.uniform(-0.06, 0.06),
            dy=rng.uniform(-0.06, 0.06),
        )
        for cell in cells
    )
    return Scene(objects, background=rng.randrange(len(BACKGROUNDS)), noise_seed=rng.randrange(2**31))


def split_of(scene: Scene) -> str:
    digest = hashlib.sha1(scene.signature().encode()).digest()
    return "heldout" if digest[0] % 8 == 0 else "train"


def scene_stream(split: str, seed: int) -> Iterator[Scene]:
    """Distinct scenes of one split, forever; deterministic for (split, seed)."""
    rng = random.Random(f"{split}:{seed}")
    seen = set()
    while True:
        scene = sample_scene(rng)
        if split_of(scene) == split and scene.signature() not in seen:
            seen.add(scene.signature())
            yield scene


def sample_scenes(split: str, n: int, seed: int) -> list[Scene]:
    """The first n scenes of `scene_stream(split, seed)`."""
    return list(itertools.islice(scene_stream(split, seed), n))


def _shape_points(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    if shape == "triangle":
        return [
            (cx + r * math.cos(a), cy + 0.12 * r + r * math.sin(a))
            for a in (-math.pi / 2, math.pi / 6, 5 * math.pi / 6)
        ]
    if shape == "cross":
        t = 0.34 * r  # half the arm thickness
        outline = [(-t, -r), (t, -r), (t, -t)]  # the top arm, clockwise; each next arm a quarter turn on
        for _ in range(3):
            outline += [(-y, x) for x, y in outline[-3:]]
        return [(cx + x, cy + y) for x, y in outline]
    raise ValueError(shape)


def render(scene: Scene, size: int = DISPLAY_SIZE) -> Image.Image:
    """Draw the scene as an RGB image of size x size pixels."""
    big = size * SUPERSAMPLE
    cell = big / GRID
    img = Image.new("RGB", (big, big), BACKGROUNDS[scene.background])
    draw = ImageDraw.Draw(img)
    for o in scene.objects:
        row, col = divmod(o.cell, GRID)
        cx, cy = (col + 0.5 + o.dx) * cell, (row + 0.5 + o.dy) * cell
        r = RADIUS[o.size] * cell
        fill = COLOURS[o.colour]
        if o.shape == "circle":
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
        elif o.shape == "square":
            h = 0.82 * r
            draw.rectangle((cx - h, cy - h, cx + h, cy + h), fill=fill)
        else:
            draw.polygon(_shape_points(o.shape, cx, cy, r * 1.08), fill=fill)
    img = img.reduce(SUPERSAMPLE)  # box filter over each SUPERSAMPLE x SUPERSAMPLE block
    plus, minus = _noise(size, scene.noise_seed % NOISE_VARIANTS)
    return ImageChops.subtract(ImageChops.add(img, plus), minus)


@functools.cache
def _noise(size: int, variant: int) -> tuple[Image.Image, Image.Image]:
    """Mild grey pixel noise of +-3 levels, as (add, subtract) images; a few fixed variants."""
    noise = np.random.default_rng(variant).integers(-3, 4, (size, size, 1)).repeat(3, axis=2)
    return (
        Image.fromarray(noise.clip(0, None).astype(np.uint8), "RGB"),
        Image.fromarray((-noise).clip(0, None).astype(np.uint8), "RGB"),
    )
