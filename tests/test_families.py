"""Model families: told from the model, served with their makers' flags, prompted and sampled as
their makers do, and their answers read (real published answers, and broken ones)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vlm_ocr import samples
from vlm_ocr.engines.base import Recognition
from vlm_ocr.engines.chat_client import ChatClient, Completion
from vlm_ocr.engines.factory import make_engine
from vlm_ocr.engines.families import FAMILIES, AnswerError, Page, Reading, detect
from vlm_ocr.engines.families.chandra import Chandra
from vlm_ocr.engines.families.dots import DotsOcr
from vlm_ocr.engines.families.lighton import LightOnOcr
from vlm_ocr.engines.families.lighton3 import LightOnOcr3
from vlm_ocr.engines.families.olmocr import OlmOcr
from vlm_ocr.engines.families.qwen import Qwen35, QwenVl, smart_resize
from vlm_ocr.engines.gpu import GpuFacts
from vlm_ocr.engines.model_files import ModelFiles
from vlm_ocr.engines.vllm.argv import ServeSpec, server_argv
from vlm_ocr.engines.vlm import ExternalServer, VlmEngine
from vlm_ocr.errors import ConfigError, InputError
from vlm_ocr.prompts import PRESETS
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.fakes import FakeEngine, MemoryStore

from .support import ROOT, b64, make_settings, make_snapshot, new_worker, page_image, png_bytes

FIXTURES = ROOT / "tests/fixtures/families"
H100 = GpuFacts.parse("NVIDIA H100 80GB HBM3, 81559 MiB, 9.0")
A4 = Page(1240, 1754, (595.0, 842.0))


def fixture(path: str) -> str:
    return (FIXTURES / path).read_text(encoding="utf-8")


# --- telling the family ------------------------------------------------------------------------

CONFIGS = {
    "qwen3_vl": {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl"},
    "qwen2_5_vl": {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
    },
    "qwen3_5": {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": {"layer_types": ["linear_attention"] * 3 + ["full_attention"]},
    },
    "dots": {"architectures": ["DotsOCRForCausalLM"], "model_type": "dots_ocr"},
    "lighton": {"architectures": ["LightOnOCRForConditionalGeneration"], "model_type": "mistral3"},
}


@pytest.mark.parametrize(
    ("name", "config", "family"),
    [
        ("QuantTrio/Qwen3-VL-32B-Instruct-AWQ", "qwen3_vl", "qwen-vl"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl", "qwen-vl"),
        ("allenai/olmOCR-2-7B-1025-FP8", "qwen2_5_vl", "olmocr"),
        ("Qwen/Qwen3.6-27B-FP8", "qwen3_5", "qwen3.5"),
        ("datalab-to/chandra-ocr-2", "qwen3_5", "chandra"),
        ("rednote-hilab/dots.mocr", "dots", "dots-ocr"),
        ("lightonai/LightOnOCR-2-1B", "lighton", "lighton-ocr"),
    ],
)
def test_the_family_follows_the_models_config_and_name(
    tmp_path: Path, name: str, config: str, family: str
) -> None:
    # The model as the image bakes it: a Hugging Face cache with its config.json.
    repo = tmp_path / "hub" / f"models--{name.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    make_snapshot(repo / "snapshots" / commit, CONFIGS[config])
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    settings = Settings(model_name=name, hf_hub_cache=str(tmp_path / "hub"))
    found = ModelFiles(settings.model).config()
    assert found == CONFIGS[config]
    detected = detect(found, name)
    assert detected.family.name == family and detected.warning is None, detected.why
    assert detected.family.model_type == CONFIGS[config]["model_type"]


def test_an_unknown_architecture_runs_as_a_chat_vlm_with_a_warning() -> None:
    detected = detect({"architectures": ["FancyOcrModel"]}, "acme/fancy-ocr")
    assert detected.family.name == "qwen-vl"
    assert "FancyOcrModel" in (detected.warning or "") and "MODEL_FAMILY" in (
        detected.warning or ""
    )
    # no config at all: the name tells, or the default does with a warning
    assert detect(None, "allenai/olmOCR-2-7B-1025-FP8").family.name == "olmocr"
    assert detect(None, "some/model").warning


def test_model_family_overrides_and_is_checked() -> None:
    chat = CONFIGS["qwen2_5_vl"]
    assert detect(chat, "my/finetune", "olmocr").family.name == "olmocr"
    with pytest.raises(
        ConfigError, match=r"MODEL_FAMILY='.*': no such family; accepted: qwen-vl, qwen3\.5, olmocr"
    ):
        detect(chat, "my/finetune", "olmOCR")


def test_the_engine_facts_name_the_family_and_its_gdn_layers(tmp_path: Path) -> None:
    make_snapshot(tmp_path / "chandra", CONFIGS["qwen3_5"])
    engine = make_engine(Settings(engine="vllm", model_name=str(tmp_path / "chandra")), gpu=H100)
    assert isinstance(engine, VlmEngine) and engine.family.name == "chandra"
    assert engine._known == {
        "family_detected_by": engine._known["family_detected_by"],
        "gdn_layers": 3,
    }
    facts = engine.family.describe()
    assert facts["family"] == "chandra" and facts["thinking"] == "off"
    assert facts["blocks"] == "with boxes"
    assert OlmOcr().describe()["blocks"] == "none (the model gives no boxes)"


# --- served, sized and asked as their makers do --------------------------------------------------


def argv_of(family: Any, **values: Any) -> list[str]:
    return server_argv(ServeSpec.resolve(Settings(**values), H100, family, cpus=16), 8000)


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize(
    ("family", "flags", "absent"),
    [
        (
            QwenVl(),
            {"--max-model-len": "8192", "--mm-processor-kwargs": '{"max_pixels": 1600000}'},
            ["--trust-remote-code", "--default-chat-template-kwargs"],
        ),
        (Qwen35(), {"--default-chat-template-kwargs": '{"enable_thinking": false}'}, []),
        (
            OlmOcr(),
            {"--max-model-len": "16384", "--limit-mm-per-prompt": '{"image": 1, "video": 0}'},
            ["--mm-processor-kwargs"],
        ),
        (
            Chandra(),
            {
                "--max-model-len": "18000",
                "--mm-processor-kwargs": '{"min_pixels": 3136, "max_pixels": 6291456}',
                "--default-chat-template-kwargs": '{"enable_thinking": false}',
            },
            [],
        ),
        (
            DotsOcr(),
            {"--chat-template-content-format": "string", "--limit-mm-per-prompt": '{"image": 1}'},
            ["--mm-processor-kwargs"],
        ),
        (LightOnOcr(), {"--limit-mm-per-prompt": '{"image": 1}'}, ["--mm-processor-kwargs"]),
    ],
)
def test_each_family_is_served_with_its_makers_flags(
    family: Any, flags: dict[str, str], absent: list[str]
) -> None:
    argv = argv_of(family)
    assert {name: flag(argv, name) for name in flags} == flags
    assert not [name for name in absent if name in argv]
    assert flag(argv, "--gdn-prefill-backend") == "triton"  # pinned for every family
    if isinstance(family, DotsOcr):
        assert "--trust-remote-code" in argv
    if isinstance(family, LightOnOcr):
        assert "--no-enable-prefix-caching" in argv
    assert flag(argv_of(family, max_model_len=4096), "--max-model-len") == "4096"


def test_each_family_sizes_its_pages_as_its_makers_do() -> None:
    a4 = (595, 842)  # points
    # each on the grid its processor resizes to (28 px: Qwen2.5-VL's and dots.ocr's patch 14,
    # merged 2x2; 32 px: Qwen3-VL's 16), Pixtral's (LightOnOCR 2) as its makers draw it
    assert OlmOcr().budget(1_600_000).size_for(*a4, pdf=True) == (896, 1288)
    assert LightOnOcr().budget(1_600_000).size_for(*a4, pdf=True) == (1088, 1540)
    w, h = Chandra().budget(1_600_000).size_for(*a4, pdf=True)  # 192 dpi, on a 28 px grid
    assert (w % 28, h % 28) == (0, 0) and abs(w - 595 * 192 / 72) < 28
    assert DotsOcr().budget(1_600_000).size_for(*a4, pdf=True) == (1652, 2352)  # 200 dpi
    assert QwenVl().budget(1_600_000).size_for(*a4, pdf=True) == (1056, 1504)  # 1.6 MP at most
    # a small image: Chandra raises its shorter side to 1,024 px; the others put it on their grid
    assert min(Chandra().budget(0).size_for(500, 700)) >= 1008
    assert OlmOcr().budget(0).size_for(500, 700) == (504, 700)


def test_a_page_reaches_a_qwen_processor_on_its_grid_so_nothing_resamples_it_there() -> None:
    # The server's Qwen-VL processor resizes an image unless it is already what its rounding
    # gives (both sides whole cells, the area within its bounds): then vLLM's API server skips the
    # resampling, a third of its CPU a page at 2,048 px. Pages of every shape, PDF and image.
    pages = [((595, 842), True), ((612, 792), True), ((842, 595), True), ((300, 2000), True),
             ((500, 700), False), ((3000, 4000), False), ((4032, 3024), False)]  # fmt: skip
    families = [QwenVl(), QwenVl("qwen2_5_vl"), OlmOcr(), DotsOcr(), LightOnOcr3("qwen3_5")]
    for family in families:
        budget = family.budget(1_600_000)
        assert budget.grid == family.patch, family.name
        for (width, height), pdf in pages:
            size = budget.size_for(width, height, pdf=pdf)
            assert size == smart_resize(*size, family.patch, 3136, budget.max_pixels), (
                family.name,
                size,
            )


def test_each_family_lays_out_its_request_as_its_makers_do() -> None:
    url = ChatClient.image_url(b"png")
    olm = OlmOcr().content(url, OlmOcr.prompt)  # type: ignore[arg-type]
    assert [c["type"] for c in olm] == ["text", "image_url"]
    assert olm[0]["text"].startswith("Attached is one page of a document that you must process.")
    dots = DotsOcr().content(url, DotsOcr.prompt)  # type: ignore[arg-type]
    assert [c["type"] for c in dots] == ["image_url", "text"]
    assert dots[1]["text"].startswith("<|img|><|imgpad|><|endofimg|>Please output the layout")
    assert [c["type"] for c in LightOnOcr().content(url, LightOnOcr.prompt)] == ["image_url"]  # type: ignore[arg-type]
    chandra = Chandra().content(url, Chandra.prompt)  # type: ignore[arg-type]
    assert chandra[1]["text"].startswith("OCR this image to HTML, arranged as layout blocks.")
    assert [a.temperature for a in OlmOcr.sampling.attempts] == [
        0.1,
        0.1,
        0.2,
        0.3,
        0.5,
        0.8,
        0.9,
        1.0,
    ]
    assert [(a.temperature, a.top_p) for a in Chandra.sampling.attempts[:2]] == [
        (0.0, 0.1),
        (0.2, 0.95),
    ]
    assert (OlmOcr.sampling.max_tokens, Chandra.sampling.max_tokens) == (8000, 12384)


# --- prompts fit the family ----------------------------------------------------------------------


def engine_of(family: Any, answers: list[str] | None = None, **values: Any) -> VlmEngine:
    settings = make_settings(**values)
    engine = VlmEngine(
        settings.vlm,
        settings.model,
        ExternalServer("http://127.0.0.1:9"),
        family=family,
        concurrency=2,
    )
    engine.client = object()  # type: ignore[assignment]  (ask is replaced)
    script = list(answers or [])

    async def ask(png: bytes, prompt: Any, attempt: Any, seed: int = 0, **kw: Any) -> Completion:
        return Completion(script.pop(0) if script else "", "stop", 10, 5)

    engine.ask = ask  # type: ignore[method-assign]
    return engine


def test_a_prompt_sent_to_a_fixed_prompt_family_is_refused() -> None:
    olm = engine_of(OlmOcr())
    assert olm.prompt_for(None, None, None) is OlmOcr.prompt
    for args, field in (
        (("markdown", None, None), "input.prompt"),
        ((None, "Read it.", None), "input.custom_prompt"),
        ((None, None, {"type": "object"}), "input.json_schema"),
    ):
        with pytest.raises(InputError) as refused:
            olm.prompt_for(*args)
        assert refused.value.field == field
        assert "olmocr family" in str(refused.value) and "(qwen-vl, qwen3.5)" in str(refused.value)
    chat = engine_of(QwenVl())
    assert chat.prompt_for("plain", None, None) is PRESETS["plain"]
    assert chat.prompt_for(None, None, None) is PRESETS["markdown"]


def test_a_refused_prompt_fails_the_job_naming_the_field(tmp_path, loop, cpu_pool) -> None:
    worker = new_worker(loop, make_settings(tmp_path), engine_of(LightOnOcr()), cpu_pool)
    job = {"images": [{"base64": b64(png_bytes(page_image(["x"])))}], "prompt": "plain"}
    result = loop.run(worker.run("refused", job))
    assert result.status == "failed" and (result.error or "").startswith("input.prompt: ")


# --- answers checked, not trusted ----------------------------------------------------------------


def test_olmocr_answers_are_read_from_their_front_matter() -> None:
    olm, prompt = OlmOcr(), OlmOcr.prompt
    assert prompt is not None
    edgar = olm.parse(fixture("olmocr/answer_edgar_text.txt"), prompt, A4)
    assert edgar.text.startswith("Edgar (or Eadgar;[1]") and "---" not in edgar.text
    assert edgar.language == "en" and edgar.flags == {"table": True, "diagram": False}
    assert edgar.turn is None
    blank = olm.parse(fixture("olmocr/answer_blank_page.txt"), prompt, A4)
    assert blank.text == ""
    card = olm.parse(fixture("olmocr/model_card_output_truncated_len50.txt"), prompt, A4)
    assert card.text.startswith("olmOCR: Unlocking Trillions of Tokens")
    table = olm.parse(fixture("olmocr/malformed_truncated_html_table.txt"), prompt, A4)
    assert table.flags["table"] and "<table>" in table.text  # cut, but its format holds
    turned = olm.parse(fixture("olmocr/mock_rotation_invalid_90.txt"), prompt, A4)
    assert turned.turn == 270  # 90 degrees counter-clockwise is 270 clockwise


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("olmocr/malformed_truncated_in_front_matter.txt", "not closed"),
        ("olmocr/pipeline_natural_text_lincoln_letter.md.txt", "does not open with front matter"),
        ("olmocr/synthetic_bad_rotation_45.txt", "rotation_correction 45 is not one of"),
    ],
)
def test_broken_olmocr_answers_are_refused(path: str, says: str) -> None:
    with pytest.raises(AnswerError, match=says):
        OlmOcr().parse(fixture(path), OlmOcr.prompt, A4)  # type: ignore[arg-type]
    with pytest.raises(AnswerError, match="lacks is_diagram"):
        OlmOcr().parse(
            "---\nprimary_language: en\nis_rotation_valid: true\n"
            "rotation_correction: 0\nis_table: false\n---\ntext",
            OlmOcr.prompt,
            A4,
        )  # type: ignore[arg-type]


def test_chandra_blocks_keep_headers_apart_and_boxes_on_the_page() -> None:
    page = Page(1000, 2000, (500.0, 1000.0))
    reading = Chandra().parse(fixture("chandra/synthetic_layout_page.html"), Chandra.prompt, page)  # type: ignore[arg-type]
    kinds = [b.kind for b in reading.blocks]
    assert kinds == [
        "page-header",
        "section-header",
        "text",
        "formula",
        "figure",
        "caption",
        "table",
        "text",
        "page-footer",
    ]
    header = reading.blocks[0]
    assert header.box == (62.0, 56.0, 938.0, 104.0)  # the 0-1000 grid in page pixels
    assert header.box_pt == (31.0, 28.0, 469.0, 52.0)  # and in PDF points
    assert header.label is None and header.content == "Journal of Examples, Vol. 3"
    assert reading.blocks[3].label == "Equation-Block"  # its own label, where it differs
    text = reading.text
    assert "Journal of Examples" not in text and "\n7" not in text  # headers, footers out
    assert "## 2 Results" in text and "$n=42$" in text
    assert "$$\nE = \\frac{1}{n}" in text and "<table><thead>" in text and "[x] Reviewed" in text
    assert "Line chart of error versus sample size." in reading.blocks[4].content
    real = Chandra().parse(fixture("chandra/real_issue77_vllm_answer.html"), Chandra.prompt, page)  # type: ignore[arg-type]
    assert [(b.kind, b.content) for b in real.blocks] == [("text", "C")]
    cut = Chandra().parse(
        fixture("chandra/synthetic_truncated_at_max_tokens.html"), Chandra.prompt, page
    )  # type: ignore[arg-type]
    assert [b.kind for b in cut.blocks] == ["section-header", "table"]  # kept as far as it goes
    with pytest.raises(AnswerError, match="repeating"):
        Chandra().parse(fixture("chandra/synthetic_repetition_loop.html"), Chandra.prompt, page)  # type: ignore[arg-type]
    with pytest.raises(AnswerError, match="no layout block"):
        Chandra().parse("I cannot read this page.", Chandra.prompt, page)  # type: ignore[arg-type]
    blank = Chandra().parse(
        '<div data-bbox="0 0 1000 1000" data-label="Blank-Page"></div>', Chandra.prompt, page
    )  # type: ignore[arg-type]
    assert blank.text == "" and blank.blocks == ()


def test_dots_cells_become_blocks_in_page_pixels() -> None:
    # docling rendered that page at 1224x1584; the model's boxes are on its resized image
    page = Page(1224, 1584)
    assert smart_resize(1224, 1584, 28, 3136, 11_289_600) == (1232, 1596)
    reading = DotsOcr().parse(fixture("dots/docling_dots_simple.json"), DotsOcr.prompt, page)  # type: ignore[arg-type]
    assert len(reading.blocks) == 17 and "not whole JSON" in reading.notes[0]  # no closing ]
    title = next(b for b in reading.blocks if b.kind == "title")
    assert title.content.startswith("# DocLayNet") and title.box is not None
    assert title.box[0] == pytest.approx(211 * 1224 / 1232, abs=0.1)
    assert any(b.kind == "figure" and b.content == "" for b in reading.blocks)
    assert reading.text.startswith("arXiv:2206.01062v1") and "## ABSTRACT" in reading.text
    lists = DotsOcr().parse(fixture("dots/docling_dots_list.json"), DotsOcr.prompt, page)  # type: ignore[arg-type]
    assert "list" in [b.kind for b in lists.blocks] and len(lists.blocks) == 12
    cut = DotsOcr().parse(fixture("dots/derived_truncated_dots_list.txt"), DotsOcr.prompt, page)  # type: ignore[arg-type]
    assert len(cut.blocks) == 11  # the cell cut off is lost, the others kept
    loop = DotsOcr().parse(fixture("dots/derived_repetition_loop.txt"), DotsOcr.prompt, page)  # type: ignore[arg-type]
    assert len(loop.blocks) == 4  # the repeated cell kept once
    whole = json.loads(fixture("dots/docling_dots_simple.json").strip() + "]")
    assert len(DotsOcr().parse(json.dumps(whole), DotsOcr.prompt, page).blocks) == 17  # type: ignore[arg-type]
    with pytest.raises(AnswerError, match="no layout cell"):
        DotsOcr().parse("The page shows a letter.", DotsOcr.prompt, page)  # type: ignore[arg-type]


def test_qwenvl_html_blocks_on_each_generations_grid() -> None:
    html3 = fixture("qwen/qwen3-vl-235b-a22b_qwenvl-html_research-report.txt").split("\n", 1)[1]
    page3 = Page(1216, 1696)
    reading = QwenVl("qwen3_vl").parse(html3, PRESETS["qwenvl-html"], page3)
    kinds = {b.kind for b in reading.blocks}
    assert {"figure", "text", "table"} <= kinds
    first_text = next(b for b in reading.blocks if b.kind == "text")
    assert first_text.content == "宇通客车 (600066)"
    assert first_text.box == pytest.approx(
        (91 * 1.216, 101 * 1.696, 346 * 1.216, 127 * 1.696), abs=0.1
    )
    assert "<table><tr><td>行业</td>" in reading.text
    html25 = fixture("qwen/qwen2.5-vl-72b_qwenvl-html_docparsing_example6.txt").split("\n", 1)[1]
    page25 = Page(1014, 1532)  # the notebook's image; the model saw it at 1008x1540
    q25 = QwenVl("qwen2_5_vl", max_pixels=12_845_056).parse(html25, PRESETS["qwenvl-html"], page25)
    title = q25.blocks[0]
    assert title.kind == "section-header" and title.content == "## Qwen2.5 Technical Report"
    assert title.box == pytest.approx(
        (310 * 1014 / 1008, 94 * 1532 / 1540, 658 * 1014 / 1008, 132 * 1532 / 1540), abs=0.1
    )
    # the chat presets' answers are the page's Markdown as it came
    assert QwenVl().parse(" # Title\n\ntext ", PRESETS["markdown"], page3) == Reading(
        "# Title\n\ntext"
    )
    with pytest.raises(AnswerError, match="no element with a data-bbox"):
        QwenVl().parse("Just text.", PRESETS["qwenvl-html"], page3)


def test_lighton_answers_are_markdown() -> None:
    answer = (
        "## Results\n\nThe cost is \\$5 per \\$x\\$ unit.\n\n<table><tr><td>1</td></tr></table>"
    )
    reading = LightOnOcr().parse(answer, LightOnOcr.prompt, A4)  # type: ignore[arg-type]
    # its makers' repair: the math unescaped, the price left as it was written
    assert (
        reading.text
        == "## Results\n\nThe cost is \\$5 per $x$ unit.\n\n<table><tr><td>1</td></tr></table>"
    )
    with pytest.raises(AnswerError, match="empty"):
        LightOnOcr().parse("   \n", LightOnOcr.prompt, A4)  # type: ignore[arg-type]


def test_a_malformed_answer_climbs_the_ladder_and_fails_with_the_parsers_reason(loop) -> None:
    page = page_image_of(["x"])
    good = fixture("olmocr/answer_edgar_text.txt")
    engine = engine_of(OlmOcr(), ["no front matter", "---\nbroken", good])
    rec = loop.run(engine.recognize(page, OlmOcr.prompt))  # type: ignore[arg-type]
    assert rec.ok and rec.attempts == 3 and rec.text.startswith("Edgar")
    engine = engine_of(OlmOcr(), ["no front matter"] * 8)
    rec = loop.run(engine.recognize(page, OlmOcr.prompt))  # type: ignore[arg-type]
    assert not rec.ok and rec.attempts == 8 and rec.fallback
    assert (rec.problem or "").startswith(
        "the answer does not open with front matter (---) on all 8"
    )


def page_image_of(paragraphs: list[str]):
    from vlm_ocr.images import Budget
    from vlm_ocr.pipeline.render import pdf_page_image

    return pdf_page_image(samples.pdf_from_pages([paragraphs]), 1, Budget(300_000))


# --- rotation by hint, fallback, and families never sharing stored texts -------------------------


def reading_turned(turn: int | None) -> Recognition:
    return Recognition("page text", finish_reason="stop", reading=Reading("page text", turn=turn))


def test_a_page_its_model_says_is_turned_is_turned_and_read_again(tmp_path, loop, cpu_pool) -> None:
    engine = FakeEngine([reading_turned(90), reading_turned(None)])
    worker = new_worker(loop, make_settings(tmp_path), engine, cpu_pool)
    upright = page_image(["A page that lies on its side."])
    job = {"images": [{"base64": b64(png_bytes(upright))}]}
    [page] = loop.run(worker.run("turned", job)).pages
    assert page.status == "ok" and page.rotated == 90 and page.attempts == 2 and engine.calls == 2
    # three turns at most, then the last reading stands
    always = FakeEngine([reading_turned(90)] * 4)
    worker = new_worker(loop, make_settings(tmp_path), always, cpu_pool)
    [page] = loop.run(worker.run("turning", job)).pages
    assert page.status == "ok" and page.rotated == 270 and always.calls == 4


def test_a_pdf_page_with_no_good_answer_falls_back_to_its_text_layer(
    tmp_path, loop, cpu_pool
) -> None:
    failed = Recognition(
        "garbage",
        ok=False,
        finish_reason="stop",
        attempts=8,
        problem="the answer does not open with front matter (---) on all 8 attempts",
        fallback=True,
    )
    store = MemoryStore()
    worker = new_worker(
        loop, make_settings(tmp_path), FakeEngine([failed, failed]), cpu_pool, store
    )
    pdf = samples.pdf_from_pages([["Clause 1: the text layer of this page."]])
    result = loop.run(worker.run("fallback", {"pdf": {"base64": b64(pdf)}, "output_prefix": "f"}))
    [page] = result.pages
    assert page.status == "ok" and page.fallback and "front matter" in page.fallback
    assert store.objects["f/page-0001.md"].decode() == "Clause 1: the text layer of this page."
    assert "f/page-0001.md" not in store.records  # a later run asks the model again
    image = {"images": [{"base64": b64(png_bytes(page_image(["An image has no text layer."])))}]}
    [no_layer] = loop.run(worker.run("nolayer", image | {"output_prefix": "g"})).pages
    assert no_layer.status == "failed" and no_layer.partial_key and no_layer.fallback is None


def test_a_page_read_by_one_family_is_never_reused_by_another(tmp_path, loop, cpu_pool) -> None:
    store = MemoryStore()
    pdf = {"pdf": {"base64": b64(samples.pdf_from_pages([["Shared page."]]))}, "output_prefix": "s"}
    olm = engine_of(OlmOcr(), [fixture("olmocr/answer_edgar_text.txt")] * 2)
    first = loop.run(new_worker(loop, make_settings(tmp_path), olm, cpu_pool, store).run("a", pdf))
    again = loop.run(new_worker(loop, make_settings(tmp_path), olm, cpu_pool, store).run("b", pdf))
    assert [p.reused for p in first.pages + again.pages] == [False, True]
    lighton = engine_of(LightOnOcr(), ["Shared page, read by LightOnOCR."])
    other = loop.run(
        new_worker(loop, make_settings(tmp_path), lighton, cpu_pool, store).run("c", pdf)
    )
    assert other.pages[0].reused is False and other.fingerprint["family"] == "lighton-ocr"
    assert (
        first.fingerprint["family"] == "olmocr"
        and first.fingerprint["id"] != other.fingerprint["id"]
    )


def test_every_family_is_listed_once_with_its_facts() -> None:
    assert list(FAMILIES) == [
        "qwen-vl",
        "qwen3.5",
        "olmocr",
        "chandra",
        "dots-ocr",
        "lighton-ocr",
        "lighton-ocr-3",
    ]
    for family in FAMILIES.values():
        assert family.version and family.min_vllm and family.sampling.attempts and family.licence
        assert family.checkpoints and all(c.repo and c.what for c in family.checkpoints)
        for variant in family.variants().values():
            assert variant.max_model_len > variant.sampling.max_tokens or family is Chandra
