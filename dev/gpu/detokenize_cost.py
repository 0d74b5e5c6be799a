"""The API server's CPU for each token of an answer, by what the token decodes to.

vLLM's API server detokenizes every answer as it is written (tokenizers' `DecodeStream`, primed
with the prompt's ids, `skip_special_tokens` on, as the worker's requests leave it). A token that
decodes to no text (a special token the answer skips, an id past the tokenizer's vocabulary) does
not move the stream on, so the next step decodes again from the prompt's last text, behind the
page's image tokens: a cost a token that grows with the page. A trained model writes text; greedy
decoding on random weights (the GPU check's stand-ins) can repeat one such token, and then the API
servers, not the engine, hold the pace. This times each kind of answer on a model's tokenizer:

    python dev/gpu/detokenize_cost.py MODEL_DIR [--image-tokens 1600] [--answer 800]

MODEL_DIR holds a `tokenizer.json` (`dev/gpu/make_dummy_model.py` writes one); run it with a Python
that has `tokenizers` (the engine's). It prints CPU-ms a token for each answer.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

# the token a page's image expands into, by the names the families' tokenizers give it
IMAGE_TOKENS = ("<|image_pad|>", "[IMG]", "<|imgpad|>", "<image>")


def prompt_ids(tok: Any, image_tokens: int) -> list[int]:
    """A page's prompt as vLLM primes the stream with it: text, the image's tokens, text."""
    vocab = tok.get_vocab()
    image = next((vocab[t] for t in IMAGE_TOKENS if t in vocab), None)
    if image is None:
        raise SystemExit(f"no image token ({', '.join(IMAGE_TOKENS)}) in this tokenizer")
    words = [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1])[100:140]]
    return (
        tok.encode(" ".join(words[:20]), add_special_tokens=False).ids
        + [image] * image_tokens
        + tok.encode(" ".join(words[20:]), add_special_tokens=False).ids
    )


def answers(tok: Any, length: int, vocab_size: int) -> dict[str, list[int]]:
    """Answers of `length` tokens: text as a model writes it, one text token over and over, one
    skipped special token over and over, and (where the model's vocabulary is larger than the
    tokenizer's) an id past the tokenizer over and over."""
    special = {a.content: i for i, a in tok.get_added_tokens_decoder().items() if a.special}
    text = sorted(set(range(tok.get_vocab_size(with_added_tokens=False))) - set(special.values()))
    rng = random.Random(0)
    kinds = {
        "text, as written": [rng.choice(text) for _ in range(length)],
        "one text token, repeated": [text[len(text) // 2]] * length,
        "one skipped special token, repeated": [max(special.values())] * length,
    }
    size = tok.get_vocab_size(with_added_tokens=True)
    if vocab_size > size:
        kinds["an id past the tokenizer, repeated"] = [size + (vocab_size - size) // 2] * length
    return kinds


def ms_a_token(tok: Any, prompt: list[int], answer: list[int]) -> float:
    from tokenizers.decoders import DecodeStream

    stream = DecodeStream(ids=prompt, skip_special_tokens=True)
    t0 = time.process_time()
    for token in answer:
        stream.step(tok, token)
    return 1000 * (time.process_time() - t0) / len(answer)


def main() -> int:
    from tokenizers import Tokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path, help="a folder with tokenizer.json (and config.json)")
    p.add_argument("--image-tokens", type=int, default=1600, help="the page's image tokens")
    p.add_argument("--answer", type=int, default=800, help="tokens an answer")
    args = p.parse_args()
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    config = args.model / "config.json"
    doc = json.loads(config.read_text()) if config.is_file() else {}
    vocab_size = int(doc.get("text_config", doc).get("vocab_size", 0))
    prompt = prompt_ids(tok, args.image_tokens)
    print(f"{args.model.name}: a prompt of {len(prompt)} tokens, answers of {args.answer}")
    for name, answer in answers(tok, args.answer, vocab_size).items():
        print(f"  {name}: {ms_a_token(tok, prompt, answer):.4f} CPU-ms a token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
