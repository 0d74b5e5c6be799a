"""A checkpoint's shapes live once, in its example config: the GPU check's dummy-weight folders
(`dev/gpu/make_dummy_model.py`) and the tests' tiny models read them from there, and the folders
load as their real checkpoints' do (transformers in the engine's environment: its config, its
tokenizer with the real special tokens and ids, its processor, the image tokens a page becomes,
the chat template's thinking switch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_ocr.engines.families import FAMILIES

from .support import ROOT
from .support import make_tiny_model as tiny
from .support.engine import engine_python

GENERATOR = ROOT / "dev/gpu/make_dummy_model.py"
EXAMPLES = sorted((ROOT / "examples").glob("*.config.json"))


def generate(name: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(engine_python()), str(GENERATOR), name, str(out)],
        env={"PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_family_checkpoint_has_its_example_config() -> None:
    stems = {p.name.removesuffix(".config.json") for p in EXAMPLES}
    for family in FAMILIES.values():
        for c in family.checkpoints:
            if c.example:
                assert c.example in stems, c.repo
                config = json.loads((ROOT / f"examples/{c.example}.config.json").read_text())
                assert config["_name_or_path"] == c.repo


def test_the_generator_retypes_no_shape() -> None:
    source = GENERATOR.read_text()
    for shape in ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads"):
        assert f'"{shape}"' not in source, shape  # it reads them from the example config


# vLLM's own configuration of an engine for each folder, as its server builds it before anything
# else: the checkpoint's architecture, lengths and quantization read and checked (an AWQ example
# without its `zero_point` failed here, at the engine's start on the GPU host)
ENGINE_CONFIG = """
import json, sys
from vllm.config import ModelConfig, VllmConfig
for folder in sys.argv[1:]:
    try:
        model = ModelConfig(model=folder, max_model_len=4096, trust_remote_code=True)
        quant = type(VllmConfig(model_config=model).quant_config).__name__
        print(json.dumps([folder, "ok", model.architectures, quant]))
    except Exception as exc:
        print(json.dumps([folder, "refused", type(exc).__name__, str(exc)[:500]]))
"""
QUANT_CONFIG = {
    None: "NoneType",
    "awq": "AutoAWQConfig",
    "fp8": "Fp8Config",
    "compressed-tensors": "CompressedTensorsConfig",
}


def test_vllm_configures_an_engine_for_every_dummy_folder(tmp_path: Path) -> None:
    folders = {}
    for example in EXAMPLES:
        name = example.name.removesuffix(".config.json")
        assert generate(name, tmp_path / name).returncode == 0, name
        folders[str(tmp_path / name)] = json.loads(example.read_text())
    proc = subprocess.run(
        [str(engine_python()), "-c", ENGINE_CONFIG, *folders],
        env={"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('["')]
    assert [folder for folder, *_ in said] == list(folders)
    for folder, outcome, architectures, quant in said:
        assert outcome == "ok", (folder, architectures, quant)
        config = folders[folder]
        assert architectures == config["architectures"]
        method = config.get("quantization_config", {}).get("quant_method")
        assert quant == QUANT_CONFIG[method], folder


def test_an_awq_checkpoint_keeps_a_vision_tower_its_groups_cannot_divide_unquantized() -> None:
    # vLLM 0.32 refused the AWQ example at its model load on the GPU host ("The input size is not
    # aligned with the quantized weight shape"): Qwen3-VL's vision MLP is 1152 -> 4304 -> 1152,
    # and 4304 is no multiple of 128. The published checkpoints keep the tower in 16 bits and
    # say so; vLLM's AWQ skips a layer whose name contains an entry of `modules_to_not_convert`.
    for example in EXAMPLES:
        config = json.loads(example.read_text())
        quant = config.get("quantization_config") or {}
        if quant.get("quant_method") != "awq":
            continue
        vision, group = config["vision_config"], quant["group_size"]
        if vision["intermediate_size"] % group or vision["hidden_size"] % group:
            kept = quant.get("modules_to_not_convert") or []
            assert any(name in "visual.blocks.0.mlp.linear_fc2" for name in kept), example.name


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_dummy_folder_is_its_example_config_as_it_is(example: Path, tmp_path: Path) -> None:
    name = example.name.removesuffix(".config.json")
    proc = generate(name, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = json.loads((tmp_path / "config.json").read_text())
    shapes = json.loads(example.read_text())
    shapes.pop("_name_or_path")
    if shapes["model_type"] == "dots_ocr":  # its configuration module, as the real ones bring
        assert written.pop("auto_map") == {"AutoConfig": "configuration_dots.DotsOCRConfig"}
    assert written == shapes
    files = {p.name for p in tmp_path.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"} <= files
    assert {"generation_config.json", "chat_template.jinja"} <= files


def test_a_family_name_gives_its_first_checkpoints_folder(tmp_path: Path) -> None:
    assert generate("lighton-ocr-3", tmp_path).returncode == 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["text_config"]["hidden_size"] == 1024  # the 0.8B's, from its example
    refused = generate("no-such-model", tmp_path / "x")
    assert refused.returncode != 0 and "no such example config or family" in refused.stderr


LOAD = """
import json, sys
from PIL import Image
from transformers import AutoConfig, AutoProcessor, AutoTokenizer

folder, width, height = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
config = AutoConfig.from_pretrained(folder)
tok = AutoTokenizer.from_pretrained(folder)
proc = AutoProcessor.from_pretrained(folder)
messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "grounding"}]}]
text = proc.apply_chat_template(
    messages, add_generation_prompt=True, tokenize=False, enable_thinking=False
)
ids = proc(text=[text], images=[Image.new("RGB", (width, height), "white")])["input_ids"][0]
ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
names = ("<|image_pad|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>")
print(json.dumps({
    "architectures": config.architectures,
    "image_token_id": config.image_token_id,
    "ids": {t: tok.convert_tokens_to_ids(t) for t in names},
    "processor": type(proc).__name__,
    "image_tokens": ids.count(config.image_token_id),
    "prompt_end": text[-60:],
}))
"""


def probe_folder(example: str, folder: Path, probe: str, *args: str) -> dict:
    """What `probe` (run in the engine's Python on the stand-in folder of `example`, then its
    arguments) printed last, as JSON."""
    assert generate(example, folder).returncode == 0
    proc = subprocess.run(
        [str(engine_python()), "-c", probe, str(folder), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("example", "page", "image_tokens", "thinking_off"),
    [
        # an A4 page at 2,048 px: 1,440 × 2,048 on the 32 px grid, 45 × 64 tokens
        ("lightonocr-3-0.8b", (1447, 2048), 2880, True),
        ("lightonocr-3-4b", (1447, 2048), 2880, True),
        # the 1B: Pixtral's 28 px tokens of a page at 1,540 px
        ("lightonocr-3-1b", (1088, 1540), 2145, False),
    ],
)
def test_the_lightonocr_3_folders_load_as_their_checkpoints_do(
    example: str, page: tuple[int, int], image_tokens: int, thinking_off: bool, tmp_path: Path
) -> None:
    found = probe_folder(example, tmp_path, LOAD, *map(str, page))
    assert found["image_tokens"] == image_tokens
    ids = found["ids"]
    assert ids["<|image_pad|>"] == found["image_token_id"]
    if thinking_off:  # Qwen3.5's vocabulary, and its template's switch
        assert found["architectures"] == ["Qwen3_5ForConditionalGeneration"]
        assert found["processor"] == "Qwen3VLProcessor"
        assert ids == {
            "<|image_pad|>": 248056,
            "<|im_end|>": 248046,
            "<|endoftext|>": 248044,
            "<think>": 248068,
            "</think>": 248069,
        }
        assert found["prompt_end"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    else:  # LightOnOCR 2's graph: Qwen's vocabulary, its own image tokens
        assert found["architectures"] == ["LightOnOCRForConditionalGeneration"]
        assert found["processor"] == "LightOnOcrProcessor"
        assert (ids["<|image_pad|>"], ids["<|im_end|>"]) == (151655, 151645)


@pytest.mark.parametrize("arch", tiny.ARCHITECTURES)
def test_the_tiny_models_are_their_examples_scaled_down(arch: str) -> None:
    ids = {t: n for n, t in enumerate(tiny.SPECIAL_TOKENS)} | {"vocab_size": 512}
    config = tiny.tiny_config(arch, ids)
    shapes = json.loads((ROOT / f"examples/{tiny.SHAPES[arch]}.config.json").read_text())
    real = shapes.get("text_config") or shapes
    text = config["text_config"]
    assert config["architectures"] == shapes["architectures"]
    assert text["num_hidden_layers"] < real["num_hidden_layers"]
    assert text["hidden_size"] < real["hidden_size"] and text["vocab_size"] == 512
    head_dim = real.get("head_dim") or real["hidden_size"] // real["num_attention_heads"]
    assert text["head_dim"] == head_dim
    rope = real.get("rope_parameters") or real.get("rope_scaling")
    assert text.get("rope_parameters", text.get("rope_scaling")) == rope
    if "layer_types" in real:  # the hybrid's pattern kept: gated-delta-net, then attention
        assert text["layer_types"] == real["layer_types"][: text["num_hidden_layers"]]
        assert "full_attention" in text["layer_types"] and "linear_attention" in text["layer_types"]
    vision = config["vision_config"]
    assert vision["patch_size"] == shapes["vision_config"]["patch_size"]
    assert config["image_token_id"] == ids["<|image_pad|>"]


def _page_arith(config: str, width: int, height: int) -> list:
    probe = (
        "import importlib.util, json, os, sys\n"
        "sys.path.insert(0, os.path.dirname(sys.argv[1]))  # as a script run from there has it\n"
        "spec = importlib.util.spec_from_file_location('pa', sys.argv[1])\n"
        "pa = importlib.util.module_from_spec(spec); spec.loader.exec_module(pa)\n"
        "vision, text = pa.shapes(json.load(open(sys.argv[2])))\n"
        "w, h = int(sys.argv[3]), int(sys.argv[4])\n"
        "patches, tokens = pa.patches_and_tokens(vision, w, h)\n"
        "print(json.dumps([patches, tokens, len(pa.text_linears(text)),\n"
        "    pa.vision_linears(vision)[:4], len(pa.vision_linears(vision)),\n"
        "    pa.decode_linears(text)[-1], pa.decode_step_bytes(text, tokens + 400, 256)]))\n"
    )
    out = subprocess.run(
        [
            str(engine_python()),
            "-c",
            probe,
            str(ROOT / "dev/gpu/page_arith.py"),
            str(ROOT / "examples" / config),
            str(width),
            str(height),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_page_arithmetic_bench_reads_a_familys_shapes_from_its_example_config() -> None:
    # dev/gpu/page_arith.py: a 192 dpi letter page for Chandra 2's shapes, and the layers it times
    patches, tokens, text_layers, first, vision_layers, head, reads = _page_arith(
        "chandra-ocr-2.config.json", 1632, 2112
    )
    assert (patches, tokens) == (102 * 132, 102 * 132 // 4)  # 16 px patches, merged 2 × 2
    # 32 layers: an MLP's two each, 8 full-attention layers' two, 24 gated-delta-net layers' three
    assert text_layers == 32 * 2 + 8 * 2 + 24 * 3
    assert vision_layers == 24 * 4
    assert first == [[1024, 3072], [1024, 1024], [1024, 4096], [4096, 1024]]  # an ungated MLP
    assert head == [2560, 248320]  # a decoding step ends in the LM head
    # a step's reads: 8 layers' fp8 keys and values (4 heads of 256), and 24 layers' float32
    # states (32 value heads of 128 × 128), each read and written
    assert reads == {
        "kv_cache": 8 * 2 * 4 * 256 * (tokens + 400) * 256,
        "gdn_states": 24 * 32 * 128 * 128 * 4 * 2 * 256,
    }


def test_the_page_arithmetic_bench_reads_pixtral_and_dots_shapes() -> None:
    # LightOnOCR 2: Pixtral's gated MLP, every text layer full attention, no state
    patches, tokens, text_layers, first, vision_layers, head, reads = _page_arith(
        "lightonocr-2-1b.config.json", 1190, 1540
    )
    assert (patches, tokens) == (84 * 110, 84 * 110 // 4)  # 14 px patches, merged 2 × 2
    assert text_layers == 28 * 4 and vision_layers == 24 * 4
    assert first[2:] == [[1024, 2 * 8192], [8192, 1024]]
    assert reads == {"kv_cache": 28 * 2 * 8 * 128 * (tokens + 400) * 256, "gdn_states": 0}
    # dots.mocr: its config is its own language model (no text_config), head size by division
    patches, tokens, text_layers, first, vision_layers, head, reads = _page_arith(
        "dots.ocr.config.json", 1700, 2200
    )
    assert vision_layers == 42 * 4 and first[2:] == [[1536, 2 * 4224], [4224, 1536]]
    assert head == [1536, 151936]
    assert reads["kv_cache"] == 28 * 2 * 2 * 128 * (tokens + 400) * 256


def test_the_page_arithmetic_counted_at_a_datasheet_needs_no_torch() -> None:
    # `--spec`: the same arithmetic counted, no GPU and no torch (this interpreter has neither)
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "dev/gpu/page_arith.py"),
            str(ROOT / "examples/lightonocr-2-1b.config.json"),
            "--page",
            "1190x1540",
            "--spec",
            "H200",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    patches, tokens = 84 * 110, 84 * 110 // 4
    assert (row["patches"], row["prompt_tokens"]) == (patches, tokens)
    # the tower's attention: QKᵀ and PV over every patch, 24 layers of 1,024 wide
    assert row["vision_attention_tflop"] == round(4 * patches**2 * 1024 * 24 / 1e12, 2)
    kv = 28 * 2 * 8 * 128 * (tokens + 400) * 256  # fp8 keys and values of 256 sequences
    assert row["decode_step_kv_cache_gb"] == round(kv / 1e9, 2)
    intake = row["vision_linear_tflop"] + row["vision_attention_tflop"] + row["text_linear_tflop"]
    assert abs(row["spec_intake_ms"] - intake / 989 * 1000) < 0.5
    ceiling = 1000 / (row["spec_intake_ms"] + row["spec_writing_ms"])
    assert abs(row["spec_ceiling_pages_per_s"] - ceiling) < 0.05


@pytest.mark.parametrize("checkpoint", ["lightonocr-3-0.8b", "lightonocr-2-1b"])
def test_the_detokenizer_bench_times_each_kind_of_answer(checkpoint: str, tmp_path: Path) -> None:
    # dev/gpu/detokenize_cost.py on a stand-in folder: its page's image token found by name
    # (Qwen's and Pixtral's), and the answers that decode to nothing timed beside text
    folder = tmp_path / checkpoint
    assert generate(checkpoint, folder).returncode == 0
    # the stand-in's tokenizer has a word for every id of the model's vocabulary; a real one
    # stops short of the embedding's rows (by a few hundred ids): make this one so
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config") or config
    text["vocab_size"] += 64
    (folder / "config.json").write_text(json.dumps(config))
    script = ROOT / "dev/gpu/detokenize_cost.py"
    out = subprocess.run(
        [str(engine_python()), str(script), str(folder), "--image-tokens", "64", "--answer", "40"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    head, *rows = out.stdout.strip().splitlines()
    prompt = int(head.split("a prompt of ")[1].split()[0])
    assert 64 < prompt < 64 + 200 and head.endswith("answers of 40")
    timed = dict(row.strip().rsplit(": ", 1) for row in rows)
    assert list(timed) == [
        "text, as written",
        "one text token, repeated",
        "one skipped special token, repeated",
        "an id past the tokenizer, repeated",
    ]
    assert all(float(v.removesuffix(" CPU-ms a token")) >= 0 for v in timed.values())


def test_every_id_of_a_stand_ins_vocabulary_decodes_to_text_but_its_special_tokens(
    tmp_path: Path,
) -> None:
    # a stand-in's random weights may write any id: each one but the special tokens decodes to
    # some text (a word, or a byte's character), none to nothing
    assert generate("lightonocr-3-0.8b", tmp_path).returncode == 0
    vocab_size = json.loads((tmp_path / "config.json").read_text())["text_config"]["vocab_size"]
    probe = (
        "import json, sys\n"
        "from tokenizers import Tokenizer\n"
        "tok = Tokenizer.from_file(sys.argv[1])\n"
        "special = {i for i, a in tok.get_added_tokens_decoder().items() if a.special}\n"
        "size = tok.get_vocab_size(with_added_tokens=True)\n"
        "silent = [i for i in range(size) if i not in special\n"
        "          and not tok.decode([i], skip_special_tokens=True)]\n"
        "print(json.dumps({'size': size, 'special': len(special), 'silent': silent}))\n"
    )
    out = subprocess.run(
        [str(engine_python()), "-c", probe, str(tmp_path / "tokenizer.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert facts["size"] == vocab_size and 0 < facts["special"] < 100
    assert facts["silent"] == []


# As vLLM's API server loads a stand-in's tokenizer (transformers' class for the model's type: a
# Qwen3.5 folder gets Qwen3.5's own, which rebuilds a BPE from the file), a family's prompt and the
# chat template's words encode to tokens, and a random id decodes to a word.
ENCODE = """
import json, sys
sys.path.insert(0, sys.argv[2])
from transformers import AutoTokenizer
from vlm_ocr.engines.families import FAMILIES
tok = AutoTokenizer.from_pretrained(sys.argv[1])
prompt = FAMILIES["chandra"].prompt.text
messages = [{"role": "user", "content": "Read this page."}]
chat = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
print(json.dumps({
    "class": type(tok).__name__,
    "chars": len(prompt),
    "tokens": len(tok(prompt, add_special_tokens=False)["input_ids"]),
    "chat": tok.convert_ids_to_tokens(tok(chat, add_special_tokens=False)["input_ids"]),
    "word": tok.decode([5000]),
}))
"""


@pytest.mark.parametrize(
    ("example", "tokenizer_class"),
    [("chandra-ocr-2", "Qwen3_5Tokenizer"), ("lightonocr-2-1b", "TokenizersBackend")],
)
def test_a_stand_ins_prompt_is_tokens_as_vllm_loads_its_tokenizer(
    example: str, tokenizer_class: str, tmp_path: Path
) -> None:
    found = probe_folder(example, tmp_path, ENCODE, str(ROOT / "src"))
    assert found["class"] == tokenizer_class
    # about a token a word or a mark, as Qwen's tokenizer counts English and HTML
    assert found["chars"] / 6 < found["tokens"] < found["chars"] / 2
    assert found["chat"][:2] == ["<|im_start|>", "user"]
    assert found["chat"][-3:] == ["<|im_start|>", "assistant", "\u010a"]  # a newline's byte
    assert found["word"] == " w5000"
