"""Image attention of an answer: where the target looked when it wrote each token.

For answer token i, the target's distribution p came from the forward at the token before it
(the prompt's last token for i = 0). Its attention there, over every earlier position, splits into
three shares that sum to 1 for every head:

    image   the image's positions (the placeholders the image features replaced)
    own     the query position itself
    text    every other position: the question, the chat template, the answer so far

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageAttention:
    """The target's attention on the image at every answer position of one run."""

    layers: tuple[int, ...]  # the decoder layers averaged (0-based), the same for every token
    rows: int  # the image grid the maps are drawn on: rows x cols cells over the image
    cols: int
    image: tuple[float, ...]  # per answer token: share of the target's attention on the image
    text: tuple[float, ...]  # per answer token: share on the other earlier positions
    own: tuple[float, ...]  # per answer token: share on its own query position
    maps: tuple[tuple[float, ...], ...]  # per answer token: rows * cols cells, row-major; sum = image share
    unavailable: str | None = None  # why nothing could be read (then every tuple is empty), else None

    @classmethod
    def missing(cls, why: str) -> ImageAttention:
        """No attention for this run, and the sentence that says why."""
        return cls((), 0, 0, (), (), (), (), why)

    def share(self, index: int) -> float | None:
        """The image share at answer position `index`, or None where there is none."""
        return self.image[index] if 0 <= index < len(self.image) else None

    def to_dict(self) -> dict:
        """The exported record (the per-token shares travel with the tokens; this is the rest)."""
        return {
            "layers": list(self.layers),
            "rows": self.rows,
            "cols": self.cols,
            "maps": [list(m) for m in self.maps],
            "unavailable": self.unavailable,
        }
