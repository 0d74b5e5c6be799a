"""`vlm-ocr plan`: KV bytes per token, image tokens, weights and pages at once, checked by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_ocr.cli.plan import plan, read_shape
from vlm_ocr.engines.families import LightOnOcr, LightOnOcr3, QwenVl

from .support import ROOT

DENSE = {
    "model_type": "qwen3_vl",
    "text_config": {
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "vocab_size": 151936,
    },
    "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304},
    "quantization_config": {"quant_method": "awq", "bits": 4},
}
HYBRID = {
    "model_type": "qwen3_5_moe",
    "text_config": {
        "num_hidden_layers": 40,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "hidden_size": 2048,
        "intermediate_size": 512,
        "moe_intermediate_size": 512,
        "num_experts": 256,
        "vocab_size": 248320,
        "full_attention_interval": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
    },
    "torch_dtype": "bfloat16",
}


def plan_for(cfg: dict, **overrides: object):
    args: dict[str, object] = {
        "model_dir": None,
        "gpu_memory_gb": 80,
        "kv_cache_dtype": "auto",
        "page_size": (911, 1288),
        "max_pixels": 1_600_000,
        "max_tokens": 4096,
        "max_model_len": 8192,
        "gpu_memory_utilization": 0.9,
        "tensor_parallel_size": 1,
        "family": QwenVl(),
    }
    return plan(cfg, **(args | overrides))  # type: ignore[arg-type]


def test_dense_kv_bytes_per_token_matches_hand_calculation() -> None:
    p = plan_for(DENSE)
    assert p.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2 == 262_144
    fp8 = plan_for(DENSE, kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token == 131_072 and fp8.pages_at_once >= 2 * p.pages_at_once - 1
    assert p.image_tokens == 1120 and p.page_tokens == 1120 + 150 + 4096
    # the arithmetic is shown and adds up
    assert p.pages_at_once == int(p.kv_budget_gb * 1e9 // (p.page_tokens * p.kv_bytes_per_token))
    assert any("262,144" in line for line in p.arithmetic)


def test_hybrid_counts_only_full_attention_layers_plus_recurrent_state() -> None:
    shape = read_shape(HYBRID)
    assert shape.full_attention_layers == 10 and shape.layers == 40
    p = plan_for(HYBRID, gpu_memory_gb=141, max_tokens=1024)
    assert p.kv_bytes_per_token == 2 * 10 * 2 * 256 * 2  # a quarter of the all-attention figure
    state = 30 * (32 * 128 * 128 * 4 + (2 * 16 * 128 + 32 * 128) * 3 * 2)
    assert shape.linear_state_bytes == state
    expected = int(p.kv_budget_gb * 1e9 // (p.page_tokens * p.kv_bytes_per_token + state))
    assert p.pages_at_once == expected > 0
    assert any("linear-attention" in n for n in p.notes)


@pytest.mark.parametrize(
    ("size", "max_pixels", "patch", "tokens"),
    [
        ((911, 1288), 1_600_000, 32, 1120),  # A4 at 1288 px longest side (Qwen3-VL)
        ((1000, 1000), 1_600_000, 32, 961),  # 992 × 992
        ((1000, 1000), 500_000, 32, 484),  # scaled down into the budget: 704 × 704
        ((1000, 1000), 1_600_000, 28, 1296),  # Qwen2-VL: 1008 × 1008 at 28 px
        ((100, 100), 1_600_000, 32, 64),  # scaled up to the 65,536 px minimum: 256 × 256
    ],
)
def test_image_tokens_follow_processor_rounding(size, max_pixels, patch, tokens) -> None:
    family = QwenVl()
    family.patch = patch  # type: ignore[misc]
    assert family.image_tokens(*size, max_pixels) == tokens


def test_a_pixtral_processor_counts_its_own_tokens() -> None:
    # A4 at 1540 px: 39 cells across and 55 down, each row closed by one more token; a
    # Qwen-style grid of the same patch would count 2,145
    assert LightOnOcr().image_tokens(1089, 1540, 1540 * 1540) == 55 * (39 + 1)
    assert LightOnOcr3("mistral3").image_tokens(1089, 1540, 1540 * 1540) == 55 * (39 + 1)
    assert LightOnOcr3("qwen3_5").image_tokens(1089, 1540, 2048 * 2048) == 1632


def test_weights_from_safetensors_when_present(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(DENSE))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 1000)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 500)
    p = plan_for(DENSE, model_dir=tmp_path, gpu_memory_gb=24)
    assert p.weights_source == "safetensors files: 1,500 bytes"
    estimated = plan_for(DENSE)
    # 31 B layer parameters at ~4.1 bits plus 2 B embedding and vision parameters at 16 bits
    assert 18 < estimated.weights_gb < 22


def test_cli_json_and_table(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(DENSE))
    run = [
        sys.executable,
        "-m",
        "vlm_ocr",
        "plan",
        str(cfg),
        "--kv-cache-dtype",
        "fp8",
        "--page-size",
        "911x1288",
    ]
    single = subprocess.run([*run, "--gpu-memory", "80", "--json"], capture_output=True, text=True)
    data = json.loads(single.stdout)
    assert data["kv_bytes_per_token"] == 131_072 and data["image_tokens"] == 1120
    table = subprocess.run(run, capture_output=True, text=True).stdout
    assert "pages at once" in table and all(f"{g:>8}" in table for g in ("24", "48", "80", "141"))


def test_the_gpu_table_of_the_deploying_docs_is_what_plan_says_for_the_example_configs() -> None:
    root = Path(__file__).resolve().parent.parent
    rows = {
        "Qwen3-VL-32B-Instruct AWQ (default)": "qwen3-vl-32b-instruct-awq.config.json",
        "Qwen3-VL-8B-Instruct AWQ": "qwen3-vl-8b-instruct-awq.config.json",
        "Qwen3-VL-32B-Instruct FP8": "qwen3-vl-32b-instruct-fp8.config.json",
    }
    table = {
        cells[0]: cells[1:]
        for line in (root / "docs" / "deploying.md").read_text().splitlines()
        if (cells := [c.strip() for c in line.strip("|").split("|")])[0] in rows
    }
    assert set(table) == set(rows)
    for name, example in rows.items():
        cfg = json.loads((root / "examples" / example).read_text())
        weights, kv_per_token, *pages = table[name]
        for gpu, cell in zip((24, 48, 80, 141), pages, strict=True):
            p = plan(
                cfg,
                model_dir=None,
                gpu_memory_gb=gpu,
                kv_cache_dtype="fp8",
                page_size=(911, 1288),
                max_pixels=1_600_000,
                max_tokens=4096,
                max_model_len=8192,
                gpu_memory_utilization=0.9,
                tensor_parallel_size=1,
                family=QwenVl(),
            )
            assert cell == (f"{p.pages_at_once:,}" if p.pages_at_once else "does not fit"), name
        assert weights == f"{p.weights_gb:.1f} GB" and kv_per_token == f"{p.kv_bytes_per_token:,}"


SIZED = "auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2"


def test_the_kv_cache_dtypes_are_one_list_in_the_help_and_both_refusals(capsys, monkeypatch):
    from vlm_ocr.cli import main as cli
    from vlm_ocr.settings import KV_CACHE_DTYPES

    config = str(ROOT / "examples/chandra-ocr-2.config.json")
    with pytest.raises(SystemExit):
        cli.main(["plan", "--help"])
    assert f"the KV cache's element type: {SIZED} (default" in " ".join(
        capsys.readouterr().out.split()
    )
    for refused in ("bf16", "half", "fp8_inc"):  # what the help listed before, and one it did not
        with pytest.raises(SystemExit) as exited:
            cli.main(["plan", config, "--kv-cache-dtype", refused])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.count("\n") == 1, err
        assert f"{refused!r} cannot be sized here; accepted: {SIZED} (see" in err
        assert "Value error" not in err
    # a value the worker takes but plan cannot size: the same list, no other
    monkeypatch.setenv("KV_CACHE_DTYPE", "fp8_inc")
    assert cli.main(["plan", config]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"vlm-ocr plan: KV_CACHE_DTYPE: 'fp8_inc' cannot be sized here; accepted: {SIZED};"
    )
    # every value the list names, the worker's settings take and plan sizes
    for dtype in SIZED.split(", "):
        assert dtype in KV_CACHE_DTYPES
        assert cli.main(["plan", config, "--kv-cache-dtype", dtype, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)[0]["kv_cache_dtype"] == dtype


def test_a_model_that_does_not_fit_says_so_instead_of_a_negative_budget(capsys) -> None:
    from vlm_ocr.cli import main as cli

    chandra = str(ROOT / "examples/chandra-ocr-2.config.json")
    assert cli.main(["plan", chandra, "--gpu-memory", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        "does not fit: the weights need 8.1 GB a GPU and vLLM's activations 4 GB more, of the "
        "0.9 GB it may take (1 GB × 0.9)"
    ) in out
    assert "KV budget" not in out and "pages at once" not in out and "-11.2" not in out
    awq = str(ROOT / "examples/qwen3-vl-32b-instruct-awq.config.json")
    assert cli.main(["plan", awq]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "does not fit: the weights need 20.0 GB a GPU" in rows["24"] and "-" not in rows["24"]
    assert "does not fit" not in rows["48"]
    # the weights fit, but the KV cache left beside them holds no whole page
    weights = plan_for(DENSE).weights_gb
    p = plan_for(DENSE, gpu_memory_gb=(weights + 4 + 0.5) / 0.9)
    assert p.pages_at_once == 0 and p.does_not_fit == p.arithmetic[-1]
    assert p.does_not_fit.startswith("does not fit: one page (5,366 tokens) needs 1.41 GB")
