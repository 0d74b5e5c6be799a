"""LightOnOCR-3 as its makers serve it: told from its config and name (a fine-tune, so its name
tells it from Chandra 2, the Qwen3.5 chat models and LightOnOCR 2), its page size, request,
sampling and flags per checkpoint, its grounding answers read into blocks (its makers' published
answers, and hostile ones), and its makers' dollar repair."""

from __future__ import annotations

import contextlib
import io
import shlex
from typing import Any

import pytest

from vlm_ocr.blocks import MAX_BLOCKS
from vlm_ocr.cli import main as cli
from vlm_ocr.engines.chat_client import ChatClient
from vlm_ocr.engines.families import FAMILIES, AnswerError, Page, detect
from vlm_ocr.engines.families.dollars import fix_escaped_dollars, is_math
from vlm_ocr.engines.families.lighton import LightOnOcr
from vlm_ocr.engines.families.lighton3 import GROUNDING, PLAIN, LightOnOcr3

from .support import ROOT

FIXTURES = ROOT / "tests/fixtures/families/lighton3"
QWEN35 = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"}
PIXTRAL = {"architectures": ["LightOnOCRForConditionalGeneration"], "model_type": "mistral3"}
A4 = Page(1447, 2048, (595.0, 842.0))


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# --- told, sized, asked and served as its makers do ----------------------------------------------


@pytest.mark.parametrize(
    ("name", "config", "family", "pixtral"),
    [
        ("lightonai/LightOnOCR-3-0.8B", QWEN35, "lighton-ocr-3", False),
        ("lightonai/LightOnOCR-3-4B", QWEN35, "lighton-ocr-3", False),
        ("lightonai/LightOnOCR-3-1B", PIXTRAL, "lighton-ocr-3", True),
        ("lightonai/LightOnOCR-3-0.8B", None, "lighton-ocr-3", False),  # no config: the name
        ("lightonai/LightOnOCR-3-1B", None, "lighton-ocr-3", True),
        ("lightonai/LightOnOCR-2-1B", PIXTRAL, "lighton-ocr", None),
        ("lightonai/LightOnOCR-2-1B", None, "lighton-ocr", None),
        ("datalab-to/chandra-ocr-2", QWEN35, "chandra", None),
        ("Qwen/Qwen3.6-27B-FP8", QWEN35, "qwen3.5", None),
    ],
)
def test_lightonocr_3_is_told_from_its_config_and_name(
    name: str, config: dict[str, Any] | None, family: str, pixtral: bool | None
) -> None:
    found = detect(config, name)
    assert found.family.name == family and found.warning is None, found.why
    assert getattr(found.family, "pixtral", None) is pixtral
    if config is not None and family == "lighton-ocr-3":
        assert f"the name {name}" in found.why  # a fine-tune: the name decided it


def serve_line(config: str, *args: str) -> list[str]:
    return next(
        shlex.split(line)
        for line in serve_output(config, *args).splitlines()
        if line and not line.startswith("#")
    )


def serve_output(config: str, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            cli.main(["plan", str(ROOT / f"examples/{config}.config.json"), "--serve-line", *args])
            == 0
        )
    return out.getvalue()


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize(
    ("config", "context", "thinking_flag"),
    [
        ("lightonocr-3-0.8b", "18000", True),
        ("lightonocr-3-4b", "18000", True),
        ("lightonocr-3-1b", "16384", False),
    ],
)
def test_each_size_is_served_with_its_makers_flags(
    config: str, context: str, thinking_flag: bool
) -> None:
    argv = serve_line(config, "--gpus", "1")
    assert flag(argv, "--limit-mm-per-prompt") == '{"image": 1}'
    assert flag(argv, "--mm-processor-cache-gb") == "0"
    assert "--no-enable-prefix-caching" in argv
    assert flag(argv, "--max-model-len") == context
    assert "--mm-processor-kwargs" not in argv  # the processor as it ships
    assert flag(argv, "--gdn-prefill-backend") == "triton"  # as for every Qwen3.5 model
    kwargs = flag(argv, "--default-chat-template-kwargs")
    assert kwargs == ('{"enable_thinking": false}' if thinking_flag else None)


def test_lightonocr_2_keeps_its_flags_and_gets_the_processor_cache_off() -> None:
    argv = serve_line("lightonocr-2-1b", "--gpus", "1")
    assert flag(argv, "--mm-processor-cache-gb") == "0"  # the worker's flag, for every family
    assert "--no-enable-prefix-caching" in argv and flag(argv, "--max-model-len") == "16384"
    assert flag(argv, "--limit-mm-per-prompt") == '{"image": 1}'
    assert "--default-chat-template-kwargs" not in argv


def test_pages_are_drawn_at_each_sizes_longest_side() -> None:
    a4 = (595, 842)  # points: a PDF page drawn to the longest side, as their client does
    # the Qwen3.5 sizes on their processor's 32 px grid; the 1B as drawn, for Pixtral's own
    assert LightOnOcr3("qwen3_5").budget(1_600_000).size_for(*a4, pdf=True) == (1440, 2048)
    assert LightOnOcr3("mistral3").budget(1_600_000).size_for(*a4, pdf=True) == (1088, 1540)
    # an image is only made smaller, and put on the grid
    assert LightOnOcr3("qwen3_5").budget(0).size_for(800, 1000) == (800, 992)
    assert LightOnOcr3("qwen3_5").budget(0).size_for(3000, 4000) == (1536, 2048)
    assert (LightOnOcr3("qwen3_5").patch, LightOnOcr3("mistral3").patch) == (32, 28)


def test_the_request_is_the_page_then_the_word_grounding() -> None:
    url = ChatClient.image_url(b"png")
    family = LightOnOcr3("qwen3_5")
    assert family.content(url, GROUNDING) == [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "grounding"},
    ]
    assert family.content(url, PLAIN) == [{"type": "image_url", "image_url": {"url": url}}]
    assert LightOnOcr3.prompt is GROUNDING  # grounding by default (see the module)
    first = LightOnOcr3.sampling.attempts[0]
    assert (first.temperature, first.top_p) == (0.1, 1.0)  # its makers' benchmarks' setting
    assert LightOnOcr3.sampling.max_tokens == 12288
    temps = [a.temperature for a in LightOnOcr3.sampling.attempts]
    assert temps == sorted(temps) and len(temps) > 1  # warmer only to get out of a loop
    assert LightOnOcr3("qwen3_5").describe()["thinking"] == "off"
    assert LightOnOcr3("mistral3").describe()["thinking"] == "the model does not think"


def test_every_lightonocr_family_pins_its_makers_engine_packages() -> None:
    for family in (LightOnOcr, LightOnOcr3):
        assert family.engine_pins == ("transformers==5.16.1",)
        assert "0.27.1" in family.broken_vllm
    others = [f for f in FAMILIES.values() if f not in (LightOnOcr, LightOnOcr3)]
    assert all(not f.engine_pins for f in others)


# --- grounding answers become blocks -------------------------------------------------------------


def test_the_makers_readme_answer_keeps_its_page_number_apart() -> None:
    reading = LightOnOcr3("qwen3_5").parse(
        fixture("lighton-readme-grounding-example.txt"), GROUNDING, A4
    )
    assert [b.kind for b in reading.blocks] == [
        "figure",
        "caption",
        "title",
        "text",
        "page-number",
    ]
    number = reading.blocks[-1]
    assert number.content == "3" and number.label == "page_number"
    # the 0-1000 grid of the image sent, in the page's pixels
    assert number.box == pytest.approx(
        (491 * 1.447, 935 * 2.048, 505 * 1.447, 950 * 2.048), abs=0.1
    )
    assert number.box_pt == pytest.approx(
        (491 * 0.595, 935 * 0.842, 505 * 0.595, 950 * 0.842), abs=0.1
    )
    assert "## 2.2 LightOnOCR-1" in reading.text and "Figure 1: Model architecture." in reading.text
    assert not reading.text.endswith("3")  # the page number is not page text


def test_a_real_4b_answer_reads_into_blocks_as_its_plain_answer_reads() -> None:
    family = LightOnOcr3("qwen3_5")
    page = Page(1000, 2000)
    reading = family.parse(fixture("mlx-4b-grounding-receipt.txt"), GROUNDING, page)
    kinds = [(b.kind, b.label) for b in reading.blocks]
    assert kinds == [("figure", "image"), ("text", None), ("title", None), ("table", None)]
    barcode, _, title, table = reading.blocks
    assert barcode.box == (191.0, 0.0, 864.0, 210.0) and barcode.content == "barcode"
    assert title.content == "## CASH BILL" and table.content.startswith("<table>")
    assert table.box == (44.0, 974.0, 970.0, 1940.0)
    # the same page read in plain mode, by MLX and by transformers: the same words
    plain = family.parse(fixture("mlx-4b-plain-receipt.txt"), PLAIN, page)
    torch = family.parse(fixture("torch-4b-plain-receipt.txt"), PLAIN, page)
    assert plain.blocks == () and "## CASH BILL" in plain.text and "## CASH BILL" in torch.text
    assert "Cashier : MANIS" in reading.text and "<td>9.00</td>" in reading.text


def test_continuations_join_and_margins_stay_out_of_the_text() -> None:
    answer = (
        "![header](80,30,920,50) Journal of Tests\n\n"
        "![section](100,80,900,120) Results\n\n"
        "![text](100,140,480,400) The first column ends\n\n"
        "![text+](520,140,900,400) in the second one.\n\n"
        "![aside_text](960,100,990,900) arXiv:2601.00001\n\n"
        "![table](100,420,900,700) <table><tr><td>&dollar;42.00</td></tr></table>\n\n"
        "![footnote](100,880,900,900) 1 A footnote.\n\n"
        "![footer](100,940,900,960) Page 1 of 2\n\n"
        "![page_number](480,965,520,980) 1"
    )
    reading = LightOnOcr3("qwen3_5").parse(answer, GROUNDING, A4)
    assert reading.text == (
        "## Results\n\nThe first column ends in the second one.\n\n"
        "<table><tr><td>$42.00</td></tr></table>\n\n1 A footnote."
    )
    continued = reading.blocks[3]
    assert continued.continues is True and continued.kind == "text" and continued.label is None
    assert reading.blocks[2].continues is None  # only the one that says so
    kinds = [b.kind for b in reading.blocks]
    assert kinds[0] == "page-header" and kinds[4] == "page-header"  # the margin note with them
    assert kinds[-2:] == ["page-footer", "page-number"]


# --- hostile answers -----------------------------------------------------------------------------


def test_hostile_boxes_are_clamped_ordered_or_dropped() -> None:
    answer = (
        "Some words before any marker.\n"
        "![text](900,900,100,100) inverted\n"
        "![text](-50,-20,1200,1500) out of range\n"
        "![text](500,500,500,500) no area\n"
        "![weird-label](0,0,10,10) unknown\n"
        "![text](1.5,2.5,30.5,40.5) decimals"
    )
    reading = LightOnOcr3("qwen3_5").parse(answer, GROUNDING, Page(1000, 1000))
    by_text = {b.content: b for b in reading.blocks}
    assert by_text["Some words before any marker."].box is None
    assert by_text["inverted"].box == (100.0, 100.0, 900.0, 900.0)
    assert by_text["out of range"].box == (0.0, 0.0, 1000.0, 1000.0)
    assert by_text["no area"].box is None  # its text kept without a box
    assert by_text["unknown"].kind == "text" and by_text["unknown"].label == "weird-label"
    assert by_text["decimals"].box == (1.5, 2.5, 30.5, 40.5)
    assert any("before the first block marker" in n for n in reading.notes)
    assert any("labels this worker does not know" in n for n in reading.notes)


def test_an_answer_cut_inside_a_marker_keeps_what_it_has() -> None:
    cut = "![title](100,80,900,120) # Title\n\n![text](100,140,900,400) Words that end\n\n![tex"
    reading = LightOnOcr3("qwen3_5").parse(cut, GROUNDING, A4)
    assert [b.content for b in reading.blocks] == ["# Title", "Words that end"]
    unclosed = "![text](100,140,900,400) Words\n\n![text](100,200,9"
    assert LightOnOcr3("qwen3_5").parse(unclosed, GROUNDING, A4).text == "Words"


def test_answers_with_no_marker_or_nothing_at_all() -> None:
    family = LightOnOcr3("qwen3_5")
    plain = family.parse("Just the page's text, \\$x\\$.", GROUNDING, A4)
    assert plain.text == "Just the page's text, $x$." and plain.blocks == ()
    assert "no block markers" in plain.notes[0]
    with pytest.raises(AnswerError, match="empty"):
        family.parse("  \n ", GROUNDING, A4)


def test_a_looping_answer_climbs_the_ladder() -> None:
    loop = "![text](100,100,900,200) Start\n\n" + "![text](100,200,900,300) again\n\n" * 40
    with pytest.raises(AnswerError, match="over and over"):
        LightOnOcr3("qwen3_5").parse(loop, GROUNDING, A4)


def test_thousands_of_blocks_are_read_within_bounds() -> None:
    many = "".join(
        f"![text]({n % 900},{n % 900},{n % 900 + 50},{n % 900 + 50}) b{n}\n" for n in range(20_000)
    )
    reading = LightOnOcr3("qwen3_5").parse(many, GROUNDING, A4)
    assert len(reading.blocks) == MAX_BLOCKS
    assert reading.blocks[-1].content == f"b{MAX_BLOCKS - 1}"
    assert any(f"more than {MAX_BLOCKS} blocks" in n for n in reading.notes)


def test_a_megabyte_of_markers_and_dollars_costs_one_pass() -> None:
    # hostile shapes for every pattern: unclosed markers, unclosed comments, lone dollars
    junk = ("![text](1,2,3" + "<!-- " + "\\$" * 3 + "`" + "1" * 50) * 20_000
    reading = LightOnOcr3("qwen3_5").parse(junk, GROUNDING, A4)
    assert reading.blocks == () and len(reading.text) > 100_000


# --- the makers' dollar repair -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "repaired"),
    [
        ("The cost is \\$5 per \\$x\\$ unit.", "The cost is \\$5 per $x$ unit."),
        ("\\$x^2 + y\\$ and \\$\\alpha_i\\$", "$x^2 + y$ and $\\alpha_i$"),
        ("\\$\\frac{a}{b}\\$, \\$\\sin x\\$", "$\\frac{a}{b}$, $\\sin x$"),
        ("US\\$5 and \\$10", "US\\$5 and \\$10"),  # money stays money
        ("from \\$5-\\$10", "from \\$5-\\$10"),
        ("\\$word\\$", "\\$word\\$"),  # a word is no math
        ("`\\$x\\$` and ```\n\\$y\\$\n```", "`\\$x\\$` and ```\n\\$y\\$\n```"),  # code
        ("<td>\\$x\\$</td>", "<td>$x$</td>"),  # inside a table cell, not inside a tag
        ('<a title="\\$x\\$">t</a>', '<a title="\\$x\\$">t</a>'),
        ("\\$x\\$\\$y\\$", "\\$x\\$\\$y\\$"),  # it would read as display math
        ("$x$ and \\$y\\$", "$x$ and $y$"),
        ("\\$x\n\\$", "\\$x\n\\$"),  # not over a line
    ],
)
def test_escaped_dollars_are_repaired_as_its_makers_do(written: str, repaired: str) -> None:
    assert fix_escaped_dollars(written) == repaired


def test_what_reads_as_math() -> None:
    assert is_math("x") and is_math("\\alpha + \\beta") and is_math("f(x) = \\max(a, b)")
    assert not is_math("5 per ") and not is_math("{x") and not is_math("ab")
    assert not is_math(" x ")


def test_lightonocr_2_repairs_its_dollars_the_same_way() -> None:
    answer = "## Results\n\nThe cost is \\$5 per \\$x\\$ unit."
    reading = LightOnOcr().parse(answer, LightOnOcr.prompt, A4)  # type: ignore[arg-type]
    assert reading.text == "## Results\n\nThe cost is \\$5 per $x$ unit."
