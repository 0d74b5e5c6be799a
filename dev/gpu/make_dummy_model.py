"""Write a model folder of a checkpoint's real shapes and no weights, for vLLM's
`--load-format dummy`: what `vlm-ocr-lab bench` measures the families with on a GPU host that can
download nothing.

    python dev/gpu/make_dummy_model.py CHECKPOINT OUT_DIR

CHECKPOINT is an example config of `examples/` by its name (`lightonocr-3-0.8b`) or its path, or
a family (`MODEL_FAMILY`'s names: its first checkpoint). The shapes are that config's, the one
place they are kept: this writes its `config.json` as it is, and around it what the config's kind
of model needs to load (by its `model_type`):

  qwen3_5, qwen3_vl  Qwen3.5's (Qwen3-VL's) vocabulary and image processor; the chat template
                     with the `enable_thinking` switch
  qwen2_5_vl         Qwen2.5-VL's vocabulary and image processor (olmOCR 2)
  mistral3           LightOnOCR's Pixtral processor (the page's longest side its `image_size`) on
                     Qwen's vocabulary, with the checkpoint's own image tokens
  dots_ocr           dots.ocr's vocabulary, image processor, template and a configuration module

The tokenizer is a byte-level BPE as Qwen's with the real vocabulary size and the real ids of the
special tokens the processor and the chat template use, so pages expand into image tokens exactly
as for the real model; speed, memory and start-up are the real architecture's, the text noise.
Its merges are learned from the worker's prompts, so a prompt's text is about as many tokens as
with the real tokenizer. Every other id is a word, so an answer decodes to text as a trained
model's does, unless the random weights write a special token (the bench counts answers with no
text: `answers_without_text`). A greedy answer repeats the prompt's last token (with thinking off,
the newline after `</think>`: whitespace), so the GPU check samples a family's greedy attempt
(`--greedy-temperature 1`).
Nothing is downloaded. Needs `tokenizers` (the GPU host's torch environment has it).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES.parent / "src"))  # the worker's families and prompts
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
QWEN35_SPECIAL = {
    "<|endoftext|>": 248044,
    "<|im_start|>": 248045,
    "<|im_end|>": 248046,
    "<|vision_start|>": 248053,
    "<|vision_end|>": 248054,
    "<|vision_pad|>": 248055,
    "<|image_pad|>": 248056,
    "<|video_pad|>": 248057,
    "<tool_call>": 248058,
    "</tool_call>": 248059,
    "<think>": 248068,
    "</think>": 248069,
}
DOTS_SPECIAL = {
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
# ChatML, each image as its vision placeholder; with `enable_thinking` false an empty think block
# opens the answer, as Qwen3.5's own template writes it
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
# LightOnOCR's: the page as one run of image tokens, no vision start or end around it
LIGHTON_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for c in message['content'] %}{% if c['type'] == 'image' or 'image_url' in c %}"
    "<|image_pad|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)
DOTS_TEMPLATE = (
    "{%- for m in messages %}{%- if m.role == 'system' %}"
    "{{- '<|system|>' + m.content + '<|endofsystem|>\\n' }}"
    "{%- elif m.role == 'user' %}{{- '<|user|>' + m.content + '<|endofuser|>' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|assistant|>' + m.content }}"
    "{%- if not loop.last %}{{- '<|endofassistant|>' }}{%- endif %}{%- endif %}{%- endfor %}"
    "{%- if messages[-1].role != 'assistant' %}{{- '<|assistant|>' }}{%- endif %}"
)
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
# What every family's image processor does besides resizing, as its makers' configs say it.
PROCESSING = {
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
    "do_convert_rgb": True,
    "rescale_factor": 1 / 255,
}


@dataclass(frozen=True)
class Kind:
    """What a kind of model needs beside its config: its vocabulary (the ids of its special
    tokens: the regular ones are numbered below the first), which of them ends an answer, and
    its chat template."""

    special: dict[str, int]
    eos: tuple[str, ...]
    template: str
    eos_token: str = "<|im_end|>"
    extra_tokens: dict[str, str] = field(default_factory=dict)


KINDS = {
    "qwen3_5": Kind(QWEN35_SPECIAL, ("<|im_end|>", "<|endoftext|>"), QWEN_TEMPLATE),
    "qwen3_vl": Kind(QWEN2_SPECIAL, ("<|im_end|>", "<|endoftext|>"), QWEN_TEMPLATE),
    "qwen2_5_vl": Kind(QWEN2_SPECIAL, ("<|im_end|>", "<|endoftext|>"), QWEN_TEMPLATE),
    "mistral3": Kind(
        QWEN2_SPECIAL,
        ("<|im_end|>",),
        LIGHTON_TEMPLATE,
        # the checkpoint's own choice of image tokens (Qwen's vision tokens, not Pixtral's
        # [IMG], [IMG_BREAK], [IMG_END], which its tokenizer does not have)
        extra_tokens={
            "image_token": "<|image_pad|>",
            "image_break_token": "<|vision_pad|>",
            "image_end_token": "<|vision_end|>",
        },
    ),
    "dots_ocr": Kind(
        DOTS_SPECIAL,
        ("<|endoftext|>", "<|endofassistant|>"),
        DOTS_TEMPLATE,
        eos_token="<|endoftext|>",
    ),
}


def example(name: str) -> Path:
    """The example config a CHECKPOINT argument names: a path, an example's name, or a family
    (its first checkpoint's, read from the worker's families)."""
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return path
    if (EXAMPLES / f"{name}.config.json").is_file():
        return EXAMPLES / f"{name}.config.json"
    from vlm_ocr.engines.families import FAMILIES

    family = FAMILIES.get(name)
    shapes = [c.example for c in family.checkpoints if c.example] if family else []
    if not shapes:
        known = sorted(p.name.removesuffix(".config.json") for p in EXAMPLES.glob("*.json"))
        raise SystemExit(f"{name}: no such example config or family; examples: {', '.join(known)}")
    return EXAMPLES / f"{shapes[0]}.config.json"


def tokenizer(out: Path, vocab_size: int, kind: Kind) -> None:
    """The byte-level BPE of the module's docstring. Not a simpler one: transformers loads a
    Qwen3.5 folder with Qwen3.5's own tokenizer class, which builds a byte-level BPE from the
    file's vocabulary and merges whatever the file's model is (a word-level stand-in's prompt
    words encoded to nothing there). Every id past the learned ones is a word (` w1234`), those
    past the real tokenizer's too: a stand-in's random weights may write any id, and one that
    decodes to no text makes vLLM's API server decode again from the prompt's last text at each
    step (detokenize_cost.py)."""
    from tokenizers import AddedToken, pre_tokenizers, trainers

    learner = qwen_bpe()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    learner.train_from_iterator(
        prompts(), trainers.BpeTrainer(initial_alphabet=alphabet, show_progress=False)
    )
    learned = json.loads(learner.to_str())["model"]
    special = kind.special
    vocab: dict[str, int] = learned["vocab"]
    assert len(vocab) < min(special.values()), "the learned tokens reach the special ids"
    taken = set(vocab.values()) | set(special.values())
    # "\u0120" is the byte-level alphabet's space: each word decodes with one before it
    vocab |= {f"\u0120w{i}": i for i in range(vocab_size) if i not in taken} | special
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    tok = qwen_bpe(vocab, merges)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    assert tok.get_vocab_size() == vocab_size == len(vocab), "a special token off its real id"
    tok.save(str(out / "tokenizer.json"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 262144,
        "eos_token": kind.eos_token,
        "pad_token": "<|endoftext|>",
        "extra_special_tokens": kind.extra_tokens or [t for t in special if t != "<|endoftext|>"],
    }
    write(out, "tokenizer_config.json", config)


# Qwen's split of text into words before its byte-level BPE (as Qwen3.5's tokenizer class has it)
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def qwen_bpe(
    vocab: dict[str, int] | None = None, merges: list[tuple[str, str]] | None = None
) -> Any:
    """A BPE tokenizer (empty, to learn, without a vocabulary) with Qwen's normalizer, split,
    byte-level pieces and decoder."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.BPE(vocab, merges) if vocab is not None else models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def prompts() -> list[str]:
    """What the worker asks models: its prompt presets, each family's own prompt, and the chat
    templates' words."""
    from vlm_ocr.engines.families import FAMILIES
    from vlm_ocr.prompts import PRESETS

    texts = [p.text for p in PRESETS.values()]
    texts += [f.prompt.text for f in FAMILIES.values() if f.prompt is not None]
    return [*texts, "system\nuser\nassistant\n\n"]


def write(out: Path, name: str, doc: dict[str, Any]) -> None:
    (out / name).write_text(json.dumps(doc, indent=1))


def processor(out: Path, config: dict[str, Any]) -> None:
    """The image processor of the config's kind, sized by its vision config."""
    kind = config["model_type"]
    vision = config.get("vision_config") or {}
    patch = int(vision.get("patch_size", 14))
    merge = int(vision.get("spatial_merge_size", config.get("spatial_merge_size", 2)))
    if kind == "mistral3":
        write(
            out,
            "preprocessor_config.json",
            {
                "image_processor_type": "PixtralImageProcessor",
                "patch_size": patch,
                "size": {"longest_edge": int(vision["image_size"])},
                **PROCESSING,
                "image_mean": CLIP_MEAN,
                "image_std": CLIP_STD,
            },
        )
        tokens = KINDS[kind].extra_tokens
        write(
            out,
            "processor_config.json",
            {
                "processor_class": "LightOnOcrProcessor",
                "patch_size": patch,
                "spatial_merge_size": merge,
                **tokens,
            },
        )
        return
    qwen3 = kind in ("qwen3_5", "qwen3_vl")
    sizes: dict[str, Any] = (
        {"size": {"shortest_edge": 65536, "longest_edge": 16777216}}
        if qwen3
        else {"min_pixels": 3136, "max_pixels": 11289600 if kind == "dots_ocr" else 12845056}
    )
    doc: dict[str, Any] = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "patch_size": patch,
        "temporal_patch_size": int(vision.get("temporal_patch_size", 2)),
        "merge_size": merge,
        **sizes,
        "image_mean": [0.5, 0.5, 0.5] if qwen3 else CLIP_MEAN,
        "image_std": [0.5, 0.5, 0.5] if qwen3 else CLIP_STD,
        **PROCESSING,
    }
    if kind != "dots_ocr":
        doc["processor_class"] = "Qwen3VLProcessor" if qwen3 else "Qwen2_5_VLProcessor"
    write(out, "preprocessor_config.json", doc)


def make(config_path: Path, out: Path) -> None:
    config = json.loads(config_path.read_text())
    config.pop("_name_or_path", None)
    kind = KINDS.get(config.get("model_type", ""))
    if kind is None:
        known = ", ".join(KINDS)
        raise SystemExit(f"{config_path}: model_type {config.get('model_type')}; known: {known}")
    text = config.get("text_config") or config
    image_token = config.get("image_token_id")
    pads = [kind.special[t] for t in ("<|image_pad|>", "<|imgpad|>") if t in kind.special]
    if image_token not in pads:
        raise SystemExit(f"{config_path}: image_token_id {image_token} is not its vocabulary's")
    if config["model_type"] == "dots_ocr":
        # transformers registers no dots_ocr config: the checkpoint brings its own module,
        # read with --trust-remote-code, as the published ones do
        config["auto_map"] = {"AutoConfig": "configuration_dots.DotsOCRConfig"}
        (out / "configuration_dots.py").write_text(DOTS_CONFIGURATION)
    write(out, "config.json", config)
    eos = [kind.special[t] for t in kind.eos]
    write(
        out,
        "generation_config.json",
        {
            "eos_token_id": eos if len(eos) > 1 else eos[0],
            "pad_token_id": kind.special["<|endoftext|>"],
        },
    )
    tokenizer(out, int(text["vocab_size"]), kind)
    processor(out, config)
    (out / "chat_template.jinja").write_text(kind.template)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    make(example(argv[1]), out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
