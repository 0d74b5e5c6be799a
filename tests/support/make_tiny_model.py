"""Generate a tiny random vision-language checkpoint that vLLM can serve, with nothing downloaded:
Qwen3-VL (the default chat family), Qwen2.5-VL (the architecture of olmOCR 2) or Qwen3.5 (hybrid
gated-delta-net layers: Chandra 2's and LightOnOCR-3's), each of a checkpoint's shapes in
`examples/` scaled down (`SHAPES`).

Run it with the engine environment's interpreter (it needs torch, transformers and tokenizers):

    .venv-engine/bin/python tests/support/make_tiny_model.py OUT_DIR [qwen3_vl|qwen2_5_vl|qwen3_5]

The weights are random, so the model "reads" nothing; what it exercises is the real request path:
the multimodal processor (resize to the pixel budget, 32x32 pixels per token for Qwen3-VL and
Qwen3.5, 28x28 for Qwen2.5-VL), the chat template (Qwen3.5's with its `enable_thinking` switch),
sampling, stop reasons and usage counts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# A minimal Qwen-style chat template: text parts verbatim, each image as its vision placeholder.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or part['type'] == 'image_url' or 'image' in part -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)

CORPUS = [
    "第一條 本法依憲法制定之。 第二條 主管機關得依申請核准之。",
    "Article 1. The parties shall comply with this agreement.",
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "應 得 須 不得 條 項 款 中華民國 法律 契約 當事人",
]


# Qwen3.5's template opens the answer with an empty think block when thinking is off
THINKING_OFF = (
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
)
THINK_TOKENS = ["<think>", "</think>"]


def build_tokenizer(out: Path, arch: str = "qwen3_vl") -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = SPECIAL_TOKENS + (THINK_TOKENS if arch == "qwen3_5" else [])
    template = CHAT_TEMPLATE
    if arch == "qwen3_5":
        template = template.replace(
            "<|im_start|>assistant\n{%- endif -%}",
            "<|im_start|>assistant\n" + THINKING_OFF + "{% endif %}",
        )
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=special[1:],
    )
    fast.chat_template = template
    fast.save_pretrained(out)
    (out / "chat_template.jinja").write_text(template)
    return {t: tok.token_to_id(t) for t in special} | {"vocab_size": tok.get_vocab_size()}


def vision_tokens(ids: dict[str, int]) -> dict[str, Any]:
    """The config's image and video token ids, as the tokenizer numbered them."""
    return {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "tie_word_embeddings": False,
    }


def save(out: Path, ids: dict[str, int], model_class: Any, config: Any) -> None:
    """The model's random weights in bf16 (seeded: the same model every run), and its
    generation config."""
    import torch

    torch.manual_seed(0)
    model_class(config).to(torch.bfloat16).save_pretrained(out)
    gen = {"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))


# Each architecture's shapes are a checkpoint's, read from its example config and scaled down:
# its layer pattern, head geometry, rope and vision patching kept, its widths and depths cut.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SHAPES = {
    "qwen3_vl": "qwen3-vl-32b-instruct",
    "qwen2_5_vl": "olmocr-2-7b-1025-fp8",  # olmOCR 2's
    "qwen3_5": "lightonocr-3-0.8b",  # LightOnOCR-3's small one: Qwen3.5, gated-delta-net layers
}
TEXT_LAYERS = {"qwen3_vl": 2, "qwen2_5_vl": 2, "qwen3_5": 4}  # Qwen3.5: three GDN, one attention
TEXT_HEADS, KV_HEADS, GDN_HEADS = 2, 1, 2
VISION = {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2}


def tiny_config(arch: str, ids: dict[str, int]) -> dict[str, Any]:
    """The example config of `arch`, scaled down, on the tiny tokenizer's ids."""
    config = json.loads((EXAMPLES / f"{SHAPES[arch]}.config.json").read_text())
    for key in ("_name_or_path", "quantization_config"):
        config.pop(key, None)  # the tiny model's weights are bf16
    text = config.setdefault("text_config", {})
    kept = ("architectures", "model_type", "text_config", "vision_config", "tie_word_embeddings")
    for key in list(config):  # a flat config (Qwen2.5-VL's) keeps its decoder's keys at the top
        if key not in kept and not key.endswith("token_id"):
            text[key] = config.pop(key)
    head_dim = int(text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])
    layers = TEXT_LAYERS[arch]
    text.update(
        vocab_size=ids["vocab_size"],
        hidden_size=TEXT_HEADS * head_dim,
        intermediate_size=2 * TEXT_HEADS * head_dim,
        num_hidden_layers=layers,
        num_attention_heads=TEXT_HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=head_dim,  # the CPU attention backend takes the real ones, not tiny ones
        max_position_embeddings=4096,
        eos_token_id=ids["<|im_end|>"],
        bos_token_id=ids["<|endoftext|>"],
        tie_word_embeddings=False,
    )
    if "layer_types" in text:
        text["layer_types"] = text["layer_types"][:layers]
        text.pop("max_window_layers", None)
    if "linear_num_key_heads" in text:
        text.update(linear_num_key_heads=GDN_HEADS, linear_num_value_heads=GDN_HEADS)
    vision = config["vision_config"]
    vision.update(VISION, out_hidden_size=TEXT_HEADS * head_dim)
    for key in ("deepstack_visual_indexes", "fullatt_block_indexes"):
        if vision.get(key):
            vision[key] = [VISION["depth"] - 1]  # below the depth
    return config | vision_tokens(ids)


def build_model(out: Path, ids: dict[str, int], arch: str) -> None:
    import transformers

    classes = {
        "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"),
        "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
        "qwen3_5": ("Qwen3_5Config", "Qwen3_5ForConditionalGeneration"),
    }
    config_class, model_class = (getattr(transformers, name) for name in classes[arch])
    save(out, ids, model_class, config_class(**tiny_config(arch, ids)))


def write_processor_config(out: Path, arch: str) -> None:
    vision = json.loads((EXAMPLES / f"{SHAPES[arch]}.config.json").read_text())["vision_config"]
    cfg = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor" if arch == "qwen2_5_vl" else "Qwen3VLProcessor",
        "patch_size": vision["patch_size"],
        "merge_size": 2,
        "temporal_patch_size": 2,
        # Qwen3.5's processor as it ships takes a page as large as 16.7 MP (LightOnOCR-3's
        # 2,048 px pages unresized); the chat models' tests send theirs at 1 MP or less
        **(
            {"size": {"shortest_edge": 65536, "longest_edge": 16777216}}
            if arch == "qwen3_5"
            else {"min_pixels": 1024, "max_pixels": 1_048_576}
        ),
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
    }
    (out / "preprocessor_config.json").write_text(json.dumps(cfg, indent=2))


ARCHITECTURES = tuple(SHAPES)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] not in ARCHITECTURES):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    arch = argv[2] if len(argv) == 3 else "qwen3_vl"
    out.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(out, arch)
    build_model(out, ids, arch)
    write_processor_config(out, arch)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
