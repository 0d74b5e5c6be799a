"""Write a model folder with a family's real shapes and no weights, for vLLM's
`--load-format dummy`: what `vlm-ocr-lab bench` measures the families with on a GPU host that can
download nothing.

    python dev/gpu/make_dummy_model.py FAMILY OUT_DIR

FAMILY is one of:
  olmocr       olmOCR-2-7B-1025-FP8: Qwen2.5-VL-7B, FP8 weights (compressed-tensors, dynamic)
  chandra      Chandra 2: Qwen3.5-4B (hybrid: gated-delta-net layers), bf16
  dots-ocr     dots.ocr: DotsOCRForCausalLM (a Qwen2 1.5B decoder and a 1.2B vision tower)
  lighton-ocr  LightOnOCR-2-1B: Pixtral vision and a Qwen3 0.6B decoder

The tokenizer is a word-level stand-in with the real vocabulary size and the real ids of the
special tokens the processor and the chat template use, so pages expand into image tokens exactly
as for the real model; speed, memory and start-up are the real architecture's, the text noise.
The shapes are the published configs' (the olmOCR and Chandra ones from their base models).
Needs `tokenizers` (the GPU host's torch environment has it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

QWEN2_SPECIAL = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
}
QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for c in message['content'] %}"
    "{% if c['type'] == 'image' or 'image' in c or 'image_url' in c %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def tokenizer(out: Path, vocab_size: int, special: dict[str, int], extra: dict[str, Any]) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0} | {f"t{i}": i for i in range(1, vocab_size)}
    for token, i in special.items():
        vocab.pop(f"t{i}", None)
        vocab[token] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(list(special))
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "model_max_length": 262144,
    } | extra
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


# What every family's image processor does besides resizing, as its makers' configs say it.
PROCESSING = {
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
    "do_convert_rgb": True,
    "rescale_factor": 1 / 255,
}


def qwen_tokens(special: dict[str, int], eos: str = "<|im_end|>") -> dict[str, Any]:
    """The tokenizer config of a Qwen-style vocabulary: every special token but the pad one."""
    return {
        "eos_token": eos,
        "pad_token": "<|endoftext|>",
        "extra_special_tokens": [t for t in special if t != "<|endoftext|>"],
    }


def write(out: Path, name: str, doc: dict[str, Any]) -> None:
    (out / name).write_text(json.dumps(doc, indent=1))


def olmocr(out: Path) -> None:
    write(
        out,
        "config.json",
        {
            "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "model_type": "qwen2_5_vl",
            "torch_dtype": "bfloat16",
            "image_token_id": 151655,
            "video_token_id": 151656,
            "vision_start_token_id": 151652,
            "vision_end_token_id": 151653,
            "vision_token_id": 151654,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
            "tie_word_embeddings": False,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "max_position_embeddings": 128000,
            "max_window_layers": 28,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "sliding_window": 32768,
            "use_sliding_window": False,
            "hidden_act": "silu",
            "vision_config": {
                "depth": 32,
                "hidden_size": 1280,
                "intermediate_size": 3420,
                "num_heads": 16,
                "in_chans": 3,
                "out_hidden_size": 3584,
                "patch_size": 14,
                "spatial_merge_size": 2,
                "spatial_patch_size": 14,
                "temporal_patch_size": 2,
                "window_size": 112,
                "fullatt_block_indexes": [7, 15, 23, 31],
                "tokens_per_second": 2,
                "hidden_act": "silu",
            },
            # llm-compressor's FP8_DYNAMIC, as olmOCR's recipe makes it: fp8 weights per channel,
            # fp8 activations per token, the vision tower and the output head left in bf16
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "format": "float-quantized",
                "quantization_status": "compressed",
                "config_groups": {
                    "group_0": {
                        "targets": ["Linear"],
                        "weights": {
                            "num_bits": 8,
                            "type": "float",
                            "strategy": "channel",
                            "symmetric": True,
                            "dynamic": False,
                        },
                        "input_activations": {
                            "num_bits": 8,
                            "type": "float",
                            "strategy": "token",
                            "symmetric": True,
                            "dynamic": True,
                        },
                    }
                },
                "ignore": ["lm_head", "re:.*visual.*"],
            },
        },
    )
    write(out, "generation_config.json", {"eos_token_id": [151645, 151643], "pad_token_id": 151643})
    write(
        out,
        "preprocessor_config.json",
        {
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2_5_VLProcessor",
            "min_pixels": 3136,
            "max_pixels": 12845056,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
            **PROCESSING,
        },
    )
    tokenizer(
        out,
        151643,
        QWEN2_SPECIAL,
        qwen_tokens(QWEN2_SPECIAL),
    )
    (out / "chat_template.jinja").write_text(QWEN_TEMPLATE)


def chandra(out: Path) -> None:
    special = {
        "<|endoftext|>": 248044,
        "<|im_start|>": 248045,
        "<|im_end|>": 248046,
        "<|vision_start|>": 248053,
        "<|vision_end|>": 248054,
        "<|image_pad|>": 248056,
        "<|video_pad|>": 248057,
    }
    layers = 32
    write(
        out,
        "config.json",
        {
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5",
            "tie_word_embeddings": True,
            "image_token_id": 248056,
            "video_token_id": 248057,
            "vision_start_token_id": 248053,
            "vision_end_token_id": 248054,
            "text_config": {
                "model_type": "qwen3_5_text",
                "hidden_size": 2560,
                "intermediate_size": 9216,
                "num_hidden_layers": layers,
                "vocab_size": 248320,
                "max_position_embeddings": 262144,
                "rms_norm_eps": 1e-6,
                "hidden_act": "silu",
                "num_attention_heads": 16,
                "num_key_value_heads": 4,
                "head_dim": 256,
                "attn_output_gate": True,
                "attention_bias": False,
                "full_attention_interval": 4,
                "layer_types": [
                    "full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                    for i in range(layers)
                ],
                "linear_num_key_heads": 16,
                "linear_num_value_heads": 32,
                "linear_key_head_dim": 128,
                "linear_value_head_dim": 128,
                "linear_conv_kernel_dim": 4,
                "mamba_ssm_dtype": "float32",
                "tie_word_embeddings": True,
                "eos_token_id": 248046,
                "bos_token_id": 248044,
                "rope_parameters": {
                    "rope_type": "default",
                    "rope_theta": 10000000,
                    "partial_rotary_factor": 0.25,
                    "mrope_interleaved": True,
                    "mrope_section": [11, 11, 10],
                },
            },
            "vision_config": {
                "model_type": "qwen3_5",
                "depth": 24,
                "hidden_size": 1024,
                "intermediate_size": 4096,
                "num_heads": 16,
                "in_channels": 3,
                "patch_size": 16,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "num_position_embeddings": 2304,
                "out_hidden_size": 2560,
                "deepstack_visual_indexes": [],
                "hidden_act": "gelu_pytorch_tanh",
            },
        },
    )
    write(out, "generation_config.json", {"eos_token_id": [248046, 248044], "pad_token_id": 248044})
    write(
        out,
        "preprocessor_config.json",
        {
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen3VLProcessor",
            "patch_size": 16,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "size": {"shortest_edge": 65536, "longest_edge": 16777216},
            **PROCESSING,
        },
    )
    tokenizer(
        out,
        248320,
        special,
        qwen_tokens(special),
    )
    (out / "chat_template.jinja").write_text(QWEN_TEMPLATE)


# The configuration class a dots.ocr folder names in its `auto_map`: a Qwen2 decoder's config with
# the vision tower's as a plain dict (vLLM's model code builds its own vision config from it).
DOTS_CONFIGURATION = '''"""dots.ocr's configuration for a dummy-weight folder: a Qwen2 config,
plus the image and video token ids and the vision tower's settings as a dict."""

from transformers import Qwen2Config


class DotsOCRConfig(Qwen2Config):
    model_type = "dots_ocr"

    def __init__(self, image_token_id=151665, video_token_id=151656, vision_config=None, **kw):
        super().__init__(**kw)
        self.image_token_id = image_token_id
        self.video_token_id = video_token_id
        self.vision_config = dict(vision_config or {})
'''


def dots(out: Path) -> None:
    special = {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<|video_pad|>": 151656,
        "<|imgpad|>": 151665,
        "<|img|>": 151666,
        "<|endofimg|>": 151667,
        "<|system|>": 151668,
        "<|endofsystem|>": 151669,
        "<|user|>": 151670,
        "<|endofuser|>": 151671,
        "<|assistant|>": 151672,
        "<|endofassistant|>": 151673,
    }
    write(
        out,
        "config.json",
        {
            "architectures": ["DotsOCRForCausalLM"],
            "model_type": "dots_ocr",
            # transformers registers no dots_ocr config: the checkpoint brings its own module,
            # read with --trust-remote-code, as the published ones do
            "auto_map": {"AutoConfig": "configuration_dots.DotsOCRConfig"},
            "attention_bias": True,
            "hidden_act": "silu",
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "max_position_embeddings": 131072,
            "max_window_layers": 28,
            "num_attention_heads": 12,
            "num_hidden_layers": 28,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000,
            "sliding_window": 131072,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 151936,
            "image_token_id": 151665,
            "video_token_id": 151656,
            "eos_token_id": [151643, 151673],
            "vision_config": {
                "embed_dim": 1536,
                "hidden_size": 1536,
                "intermediate_size": 4224,
                "num_hidden_layers": 42,
                "num_attention_heads": 12,
                "num_channels": 3,
                "patch_size": 14,
                "post_norm": True,
                "rms_norm_eps": 1e-5,
                "spatial_merge_size": 2,
                "temporal_patch_size": 1,
                "use_bias": False,
                "attn_implementation": "flash_attention_2",
                "init_merger_std": 0.02,
                "initializer_range": 0.02,
                "is_causal": False,
            },
        },
    )
    write(out, "generation_config.json", {"max_length": 32768, "eos_token_id": [151643, 151673]})
    write(
        out,
        "preprocessor_config.json",
        {
            "image_processor_type": "Qwen2VLImageProcessor",
            "min_pixels": 3136,
            "max_pixels": 11289600,
            "patch_size": 14,
            "temporal_patch_size": 1,
            "merge_size": 2,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
            **PROCESSING,
        },
    )
    tokenizer(
        out,
        151643,
        special,
        qwen_tokens(special, eos="<|endoftext|>"),
    )
    (out / "configuration_dots.py").write_text(DOTS_CONFIGURATION)
    (out / "chat_template.jinja").write_text(
        "{%- for m in messages %}{%- if m.role == 'system' %}"
        "{{- '<|system|>' + m.content + '<|endofsystem|>\\n' }}"
        "{%- elif m.role == 'user' %}{{- '<|user|>' + m.content + '<|endofuser|>' }}"
        "{%- elif m.role == 'assistant' %}{{- '<|assistant|>' + m.content }}"
        "{%- if not loop.last %}{{- '<|endofassistant|>' }}{%- endif %}{%- endif %}{%- endfor %}"
        "{%- if messages[-1].role != 'assistant' %}{{- '<|assistant|>' }}{%- endif %}"
    )


def lighton(out: Path) -> None:
    layers = 28
    write(
        out,
        "config.json",
        {
            "architectures": ["LightOnOCRForConditionalGeneration"],
            "model_type": "mistral3",
            "dtype": "bfloat16",
            "eos_token_id": 151645,
            "pad_token_id": 151643,
            "image_token_id": 151655,
            "multimodal_projector_bias": False,
            "projector_hidden_act": "gelu",
            "spatial_merge_size": 2,
            "vision_feature_layer": -1,
            "text_config": {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "head_dim": 128,
                "hidden_act": "silu",
                "hidden_size": 1024,
                "intermediate_size": 3072,
                "layer_types": ["full_attention"] * layers,
                "max_position_embeddings": 16384,
                "max_window_layers": layers,
                "num_attention_heads": 16,
                "num_hidden_layers": layers,
                "num_key_value_heads": 8,
                "rms_norm_eps": 1e-6,
                "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
                "rope_theta": 1000000,
                "sliding_window": None,
                "use_sliding_window": False,
                "tie_word_embeddings": True,
                "vocab_size": 151936,
                "attention_bias": False,
            },
            "vision_config": {
                "model_type": "pixtral",
                "head_dim": 64,
                "hidden_act": "silu",
                "hidden_size": 1024,
                "image_size": 1540,
                "intermediate_size": 8192,
                "num_attention_heads": 16,
                "num_channels": 3,
                "num_hidden_layers": 24,
                "patch_size": 14,
                "rope_parameters": {"rope_theta": 10000, "rope_type": "default"},
                "rope_theta": 10000,
            },
        },
    )
    write(out, "generation_config.json", {"eos_token_id": 151645, "pad_token_id": 151643})
    write(
        out,
        "preprocessor_config.json",
        {
            "image_processor_type": "PixtralImageProcessor",
            "patch_size": 14,
            "size": {"longest_edge": 1540},
            **PROCESSING,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
        },
    )
    write(
        out,
        "processor_config.json",
        {
            "processor_class": "LightOnOcrProcessor",
            "patch_size": 14,
            "spatial_merge_size": 2,
            # the checkpoint's own choice of image tokens (Qwen's vision tokens, not Pixtral's
            # [IMG], [IMG_BREAK], [IMG_END], which its tokenizer does not have)
            "image_token": "<|image_pad|>",
            "image_break_token": "<|vision_pad|>",
            "image_end_token": "<|vision_end|>",
        },
    )
    tokenizer(
        out,
        151643,
        QWEN2_SPECIAL,
        {
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "extra_special_tokens": {
                "image_token": "<|image_pad|>",
                "image_break_token": "<|vision_pad|>",
                "image_end_token": "<|vision_end|>",
            },
        },
    )
    (out / "chat_template.jinja").write_text(
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
        "{% for c in message['content'] %}{% if c['type'] == 'image' or 'image_url' in c %}"
        "<|image_pad|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}"
        "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% endif %}"
    )


FAMILIES = {"olmocr": olmocr, "chandra": chandra, "dots-ocr": dots, "lighton-ocr": lighton}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in FAMILIES:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    FAMILIES[argv[1]](out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
