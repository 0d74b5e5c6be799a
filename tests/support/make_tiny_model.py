"""Generate a tiny random vision-language checkpoint that vLLM can serve, with nothing downloaded:
Qwen3-VL (the default chat family) or Qwen2.5-VL (the architecture of olmOCR 2).

Run it with the engine environment's interpreter (it needs torch, transformers and tokenizers):

    .venv-engine/bin/python tests/support/make_tiny_model.py OUT_DIR [qwen3_vl | qwen2_5_vl]

The weights are random, so the model "reads" nothing; what it exercises is the real request path:
the multimodal processor (resize to the pixel budget, 32x32 pixels per token for Qwen3-VL, 28x28
for Qwen2.5-VL), the chat template, sampling, stop reasons and usage counts.
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


def build_tokenizer(out: Path) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return {t: tok.token_to_id(t) for t in SPECIAL_TOKENS} | {"vocab_size": tok.get_vocab_size()}


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


def build_model(out: Path, ids: dict[str, int], arch: str) -> None:
    if arch == "qwen2_5_vl":
        build_qwen2_5_vl(out, ids)
        return
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    head_dim = 64  # the CPU attention backend rejects head_dim 16
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": 512,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": head_dim,
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [8, 12, 12],  # sums to head_dim / 2
                "mrope_interleaved": True,
            },
            "eos_token_id": ids["<|im_end|>"],
            "bos_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 2,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 128,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": [1],  # must be below depth
        },
        **vision_tokens(ids),
    )
    save(out, ids, Qwen3VLForConditionalGeneration, config)


def build_qwen2_5_vl(out: Path, ids: dict[str, int]) -> None:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": 512,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,  # head_dim 64: the CPU attention backend needs it
            "num_key_value_heads": 1,
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": [8, 12, 12],  # sums to head_dim / 2
            },
            "eos_token_id": ids["<|im_end|>"],
            "bos_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 128,
            "window_size": 112,
            "fullatt_block_indexes": [1],
        },
        **vision_tokens(ids),
    )
    save(out, ids, Qwen2_5_VLForConditionalGeneration, config)


def write_processor_config(out: Path, arch: str) -> None:
    patch = 14 if arch == "qwen2_5_vl" else 16
    cfg = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor" if arch == "qwen2_5_vl" else "Qwen3VLProcessor",
        "patch_size": patch,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "min_pixels": 1024,
        "max_pixels": 1_048_576,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
    }
    (out / "preprocessor_config.json").write_text(json.dumps(cfg, indent=2))


ARCHITECTURES = ("qwen3_vl", "qwen2_5_vl")


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] not in ARCHITECTURES):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    arch = argv[2] if len(argv) == 3 else "qwen3_vl"
    out.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(out)
    build_model(out, ids, arch)
    write_processor_config(out, arch)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
