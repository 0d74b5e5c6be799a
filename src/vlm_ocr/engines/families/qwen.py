"""Qwen's general chat VLMs: Qwen3-VL and Qwen2.5-VL, and the hybrid Qwen3.5 / Qwen3.6, whose
gated-delta-net layers and reasoning set them apart. A job chooses the prompt (the project's
presets, its own, or `qwenvl-html`, Qwen's document-parsing mode, which answers with blocks)."""

from __future__ import annotations

from ...blocks import RawBlock
from ...prompts import Prompt
from ...settings import StartMode
from ..reading import Page, Reading
from . import html
from .base import (
    AnswerError,
    Checkpoint,
    Family,
    Sampling,
    from_grid,
    smart_resize,
    temperatures,
)

# model_type of the Qwen2 generations: a 28 px token, and boxes in pixels of the resized image
QWEN2_TYPES = ("qwen2_5_vl", "qwen2_vl")
# Greedy first; then olmOCR's ladder, so a looping page gets out of its loop.
CHAT_LADDER = temperatures(0.0, 0.1, 0.1, 0.2, 0.3, 0.5, 0.8)

# qwenvl html: the element's class (or tag) onto the block vocabulary
QWENVL_LABELS = {
    "h1": "title",
    "title": "title",
    **{f"h{n}": "section-header" for n in range(2, 7)},
    "section-header": "section-header",
    "p": "text",
    "text": "text",
    "div": "text",
    "span": "text",
    "table": "table",
    "formula": "formula",
    "formula.machine_printed": "formula",
    "formula.handwritten": "formula",
    "chemical formula": "formula",
    "image": "figure",
    "img": "figure",
    "chart": "figure",
    "figure": "figure",
    "music sheet": "figure",
    "caption": "caption",
    "image caption": "caption",
    "footnote": "footnote",
    "header": "page-header",
    "page_header": "page-header",
    "page-header": "page-header",
    "footer": "page-footer",
    "page_footer": "page-footer",
    "page-footer": "page-footer",
    "page_number": "page-number",
    "page-number": "page-number",
    "code": "code",
    "ol": "list",
    "ul": "list",
    "li": "list",
    "list": "list",
}


class QwenVl(Family):
    name = "qwen-vl"
    version = "1"
    title = "Qwen3-VL / Qwen2.5-VL (chat)"
    architectures = frozenset(
        {
            "Qwen3VLForConditionalGeneration",
            "Qwen3VLMoeForConditionalGeneration",
            "Qwen2_5_VLForConditionalGeneration",
            "Qwen2VLForConditionalGeneration",
        }
    )
    name_hints = ("qwen3-vl", "qwen2.5-vl", "qwen2-vl", "qwen3vl", "qwen2_5_vl")
    answer = (
        "Markdown; `json_schema` by guided decoding; with `qwenvl-html`, HTML blocks with "
        "`data-bbox` (0-1000 grid; Qwen2.5-VL: pixels of the resized image)"
    )
    sampling = Sampling(CHAT_LADDER[:4], 4096)
    max_model_len = 8192
    min_vllm = "0.11.0"
    boxes = True  # with the qwenvl-html prompt
    labels = QWENVL_LABELS
    licence = "Apache-2.0"
    # No torch.compile: on the H200 (vLLM 0.32) the AWQ model was ready in under a third of the
    # time, and read within a few hundredths of its pages a second with it.
    start_mode = StartMode.FAST
    # One API server for the 32B models: on an H200 (vLLM 0.32) the AWQ model read as many pages
    # a second with one as with two, the GPU busy throughout and the one API server at about a
    # tenth of a CPU (docs/models.md); one process fewer. A smaller or sparser model writes its
    # pages faster than that was measured at: the rule's count (`__init__`).
    api_server_count = 1
    checkpoints = (
        Checkpoint(
            "QuantTrio/Qwen3-VL-32B-Instruct-AWQ",
            "qwen3-vl-32b-instruct-awq",
            "Qwen3-VL, 32B, AWQ INT4",
            preset="any listed GPU (general VLM, takes custom prompts and JSON schemas)",
        ),
        Checkpoint(
            "Qwen/Qwen3-VL-32B-Instruct-FP8",
            "qwen3-vl-32b-instruct-fp8",
            "Qwen3-VL, 32B, FP8",
            preset="H200 (fastest Qwen3-VL on Hopper; needs a network volume)",
        ),
        Checkpoint(
            "Qwen/Qwen3-VL-32B-Instruct",
            "qwen3-vl-32b-instruct",
            "Qwen3-VL, 32B, BF16",
            preset="on 2 GPUs of 48-80 GB per worker (TENSOR_PARALLEL_SIZE=2); on several GPUs "
            "any other preset runs a replica per GPU",
            preset_defaults=(("TENSOR_PARALLEL_SIZE", 2),),
        ),
        Checkpoint(
            "QuantTrio/Qwen3-VL-8B-Instruct-AWQ",
            "qwen3-vl-8b-instruct-awq",
            "Qwen3-VL, 8B, AWQ INT4",
            64.6,
            "Qwen3-VL-8B, in Datalab's table",
        ),
    )

    def __init__(
        self, model_type: str = "", *, model: str = "", max_pixels: int = 1_600_000
    ) -> None:
        # `max_pixels`: what the server's processor resizes to (MAX_PIXELS)
        super().__init__(model_type, model=model, max_pixels=max_pixels)
        if model_type.startswith(QWEN2_TYPES):
            self.patch = 28  # patch 14, merged 2×2 (Qwen3-VL and Qwen3.5: 16, merged 2×2)
        if "32b" not in self.model:
            self.api_server_count = None  # type: ignore[misc]

    def parse(self, answer: str, prompt: Prompt, page: Page) -> Reading:
        if prompt.answer != "qwenvl-html":
            return Reading(answer.strip())
        return self.parse_html(answer, page)

    def parse_html(self, answer: str, page: Page) -> Reading:
        text = answer.strip().removeprefix("```html").removesuffix("```")
        elements = html.boxed(html.parse(text))
        if not elements:
            raise AnswerError("no element with a data-bbox in the qwenvl html answer")
        raw = []
        for node in elements:
            label = node.attrs.get("class", "").strip().lower() or node.tag
            kind = QWENVL_LABELS.get(label, QWENVL_LABELS.get(node.tag, "text"))
            table = html.find(node, "table") if node.tag != "table" else node
            if kind == "table" and table is not None:
                content = html.outer_html(table)
            elif kind == "formula":
                content = node.text().strip()
            elif kind == "figure":
                content = ""
            elif node.tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                content = html.markdown(html.Node("div", children=[node]))
            else:
                content = html.markdown(node)
            raw.append(RawBlock(label, self.box(html.box_of(node), page), content))
        placed = self.placed(raw, page)
        blocks = tuple(placed.blocks)
        return Reading(self.text_of(blocks), blocks, notes=tuple(placed.notes))

    def box(self, box: tuple[float, ...] | None, page: Page) -> tuple[float, ...] | None:
        """Qwen3-VL: a 0-1000 grid; Qwen2.5-VL: pixels of the image its processor resized."""
        if box is None or not self.model_type.startswith(QWEN2_TYPES):
            return from_grid(box, page)
        w, h = smart_resize(page.width, page.height, self.patch, 3136, self.max_pixels)
        sx, sy = page.width / w, page.height / h
        return (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)


class Qwen35(QwenVl):
    """Qwen3.5 / Qwen3.6: hybrid attention (gated-delta-net layers) and reasoning, thinking by
    default; the worker turns it off at launch and in every request."""

    name = "qwen3.5"
    version = "1"
    title = "Qwen3.5 / Qwen3.6 (chat, hybrid attention)"
    architectures = frozenset(
        {"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"}
    )
    name_hints = ("qwen3.5", "qwen3.6", "qwen3_5", "qwen3_6")
    min_vllm = "0.17.0"
    thinks = True
    # Not measured without torch.compile: the Qwen3.5-based LightOnOCR-3 read about a tenth
    # fewer pages a second without it (its gated-delta-net layers are compiled pieces).
    start_mode = StartMode.THROUGHPUT
    # API servers by the rule, not Qwen3-VL's one: the small Qwen3.5's busiest API server ran a
    # full CPU on an H200 (docs/models.md).
    api_server_count = None
    checkpoints = (
        Checkpoint(
            "Qwen/Qwen3.6-27B-FP8",
            "",
            "Qwen3.6, 27B, FP8",
            preset="H200 (hybrid general VLM, thinking off)",
        ),
        Checkpoint("Qwen/Qwen3.6-35B-A3B", "", "Qwen3.6, 35B mixture of experts (3B active)"),
    )
