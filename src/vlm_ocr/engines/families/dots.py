"""dots.ocr (rednote-hilab/dots.ocr, and dots.mocr, its 1.5), driven as its parser drives it:
the page first, then its `prompt_layout_all_en` behind the image placeholder its chat template
expects, pages drawn at 200 dpi, temperature 0.1. The answer is a JSON list of cells, each a
box in pixels of the image its processor resized, a category and the cell's text (Markdown;
HTML for tables, LaTeX for formulas). A cut-off or looping answer is salvaged cell by cell."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from ...blocks import RawBlock
from ...images import Budget
from ...prompts import Prompt
from ...settings import StartMode
from ..reading import Page, Reading
from .base import AnswerError, Checkpoint, Family, Sampling, smart_resize, temperatures

PROMPT = Prompt(
    "dots-layout-all-en",
    "1",
    resources.files(__package__).joinpath("prompts/dots-layout-all-en.txt").read_text("utf-8"),
)
# the image placeholder of its chat template, written into the text so vLLM adds no newline
PLACEHOLDER = "<|img|><|imgpad|><|endofimg|>"
MIN_PIXELS, MAX_PIXELS = 3136, 11_289_600
LABELS = {
    "caption": "caption",
    "footnote": "footnote",
    "formula": "formula",
    "list-item": "list",
    "page-footer": "page-footer",
    "page-header": "page-header",
    "picture": "figure",
    "section-header": "section-header",
    "table": "table",
    "text": "text",
    "title": "title",
}
REPEATS = 5  # a cell's category and text this often: a loop, later copies dropped


class DotsOcr(Family):
    name = "dots-ocr"
    version = "1"
    title = "dots.ocr / dots.mocr"
    architectures = frozenset({"DotsOCRForCausalLM"})
    name_hints = ("dots.ocr", "dots.mocr", "dots_ocr", "dotsocr")
    patch = 28  # patch 14, merged 2×2: the factor its processor resizes on
    answer = (
        "a JSON list of `{bbox, category, text}` in pixels of the resized image; a broken list "
        "is salvaged object by object"
    )
    prompt = PROMPT
    # its parser's one attempt at 0.1; then warmer, so a loop gets out of itself
    sampling = Sampling(temperatures(0.1, 0.2, 0.3, 0.5, top_p=1.0), 16384)
    max_model_len = 24576
    min_vllm = "0.11.0"
    boxes = True
    text_layer_fallback = True
    labels = LABELS
    licence = "MIT, with its makers' licence agreement (commercial use allowed)"
    # No torch.compile: on the H200 (vLLM 0.32) it read more pages a second without it than
    # with it, and the engine was ready in a little over half the time.
    start_mode = StartMode.FAST
    checkpoints = (
        Checkpoint(
            "rednote-hilab/dots.mocr",
            "dots.ocr",
            "dots.mocr (1.5), 3B",
            83.9,
            preset="any listed GPU (OCR with layout blocks)",
        ),
        Checkpoint(
            "rednote-hilab/dots.ocr", "", "dots.ocr, 1.7B", 79.1, omnidocbench="0.125 / 0.160"
        ),
    )

    def budget(self, max_pixels: int) -> Budget:
        return Budget(MAX_PIXELS, dpi=200, grid=self.grid)

    def limit_mm_per_prompt(self) -> dict[str, int]:
        return {"image": 1}

    def processor_kwargs(self, max_pixels: int) -> dict[str, Any] | None:
        return None  # its processor's own bounds, which its boxes refer to

    def serve_args(self) -> list[str]:
        return ["--trust-remote-code", "--chat-template-content-format", "string"]

    def content(self, image_url: str, prompt: Prompt) -> list[dict[str, Any]]:
        return [
            {"type": "image_url", "image_url": {"url": image_url}},
            {"type": "text", "text": PLACEHOLDER + prompt.text},
        ]

    def parse(self, answer: str, prompt: Prompt, page: Page) -> Reading:
        cells, salvaged = read_cells(answer)
        if not cells:
            raise AnswerError("no layout cell (bbox, category, text) in the answer")
        # its boxes are in pixels of the image its processor made of ours
        w, h = smart_resize(page.width, page.height, self.patch, MIN_PIXELS, MAX_PIXELS)
        sx, sy = page.width / w, page.height / h
        raw = []
        for cell in cells:
            box = cell.get("bbox")
            if isinstance(box, list) and len(box) == 4:
                try:
                    box = (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
                except TypeError:
                    box = None
            else:
                box = None
            text = cell.get("text")
            raw.append(
                RawBlock(
                    str(cell.get("category", "Text")), box, text if isinstance(text, str) else ""
                )
            )
        placed = self.placed(raw, page)
        blocks = tuple(placed.blocks)
        notes = tuple(placed.notes) + (
            (f"the answer was not whole JSON: {len(cells)} cells were salvaged",)
            if salvaged
            else ()
        )
        return Reading(self.text_of(blocks), blocks, notes=notes)


def read_cells(answer: str) -> tuple[list[dict[str, Any]], bool]:
    """The answer's cells, and whether they had to be salvaged from broken JSON: each complete
    `{…}` object is kept, a cut-off last one is lost, and the copies of a looping cell (the
    same category and text `REPEATS` times or more, or a box seen before) are dropped."""
    text = answer.strip()
    try:
        value = json.loads(text)
        if isinstance(value, list) and all(isinstance(c, dict) for c in value):
            return value, False
    except ValueError:
        pass
    cells = []
    for chunk in objects(text):
        try:
            cell = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(cell, dict) and ("bbox" in cell or "category" in cell):
            cells.append(cell)
    return dedupe(cells), True


def objects(text: str) -> list[str]:
    """The top-level `{…}` objects of a JSON-like text, by brace depth outside strings."""
    found, depth, start, in_string, escaped = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                found.append(text[start : i + 1])
    return found


def dedupe(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen_boxes: set[str] = set()
    counts: dict[tuple[str, str], int] = {}
    for cell in cells:
        key = (str(cell.get("category")), str(cell.get("text")))
        counts[key] = counts.get(key, 0) + 1
    kept, emitted = [], set()
    for cell in cells:
        box = json.dumps(cell.get("bbox"))
        key = (str(cell.get("category")), str(cell.get("text")))
        if box in seen_boxes and cell.get("bbox") is not None:
            continue
        if counts[key] >= REPEATS and key in emitted:
            continue
        seen_boxes.add(box)
        emitted.add(key)
        kept.append(cell)
    return kept
