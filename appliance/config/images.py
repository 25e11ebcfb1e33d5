"""What counts as an image observation, and how its axes map onto a CNN's (channels, height, width):
one rule for the family a non-Ocean env gets (:mod:`appliance.config.families`) and the encoder the
policy builds (:mod:`appliance.train.policy`).

Frames come either way round, and stacked: (H, W, C) as Gymnasium's pixel envs give them, (C, H, W)
as ``FrameStackObservation`` gives grayscale frames (4, 84, 84), (S, H, W, C) stacked colour frames,
and (H, W) single grayscale frames. Channels are the short axis (at most :data:`MAX_CHANNELS`), the
sides the long ones (at least :data:`MIN_SIDE`; a 2-D array counts only from :data:`MIN_FRAME`
a side, below which it is more likely a board than a frame).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SIDE = 8
MIN_FRAME = 32  # a 2-D (H, W) array is a frame from this size; a 9x9 board is not
MAX_CHANNELS = 16  # 3-D: colour, or up to 16 stacked grayscale frames
MAX_FRAME_CHANNELS = 4  # 4-D: stacked frames of at most 4 channels each (RGB, RGBA)
NATURE_MIN_SIDE = 36  # the Nature CNN's 8/4, 4/2, 3/1 convolutions need 36 pixels a side


@dataclass(frozen=True)
class ImageLayout:
    """An image observation of ``shape``: ``axes`` orders its axes as (channel axes..., height,
    width), whose channel axes merge into ``channels``; ``order`` names the layout."""

    shape: tuple[int, ...]
    order: str  # "HW" | "HWC" | "CHW" | "SHWC" | "SCHW"
    axes: tuple[int, ...]
    channels: int
    height: int
    width: int

    def describe(self) -> str:
        plural = "s" if self.channels != 1 else ""
        return f"{self.order} frames {self.shape} ({self.channels} channel{plural} of {self.height}x{self.width})"


def image_layout(shape: tuple[int, ...]) -> ImageLayout | None:
    """The layout of an observation of ``shape`` if it is an image (see the module docstring), else None."""
    shape = tuple(int(s) for s in shape)

    def sides(h: int, w: int, least: int = MIN_SIDE) -> bool:
        return h >= least and w >= least

    if len(shape) == 2 and sides(*shape, least=MIN_FRAME):
        return ImageLayout(shape, "HW", (0, 1), 1, *shape)
    if len(shape) == 3:
        a, b, c = shape
        if c <= MAX_CHANNELS and sides(a, b):
            return ImageLayout(shape, "HWC", (2, 0, 1), c, a, b)
        if a <= MAX_CHANNELS and sides(b, c):
            return ImageLayout(shape, "CHW", (0, 1, 2), a, b, c)
    if len(shape) == 4:
        s, a, b, c = shape
        if c <= MAX_FRAME_CHANNELS and sides(a, b):
            return ImageLayout(shape, "SHWC", (0, 3, 1, 2), s * c, a, b)
        if a <= MAX_FRAME_CHANNELS and sides(b, c):
            return ImageLayout(shape, "SCHW", (0, 1, 2, 3), s * a, b, c)
    return None
