"""Build a tiny random-weight Llama model and its tokenizer offline, deterministically, in seconds.

Usage: python engines/tiny_model.py OUT_DIR  (run with the vLLM venv's python: it needs torch,
transformers and tokenizers). Nothing is downloaded. The weights are random, so the text is
nonsense, but every part the serving stack touches is real: config.json, safetensors weights,
a byte-level BPE tokenizer and a chat template, so /v1/completions and /v1/chat/completions work.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Bump when anything below changes: the cache beside the venvs is keyed on it.
VERSION = 3
SEED = 1234
VOCAB = 2048
# Embedded training text for the tokenizer: any text tokenizes (byte-level), this only shapes merges.
# It holds rushhour's prompt words (loadgen/prompts.py), so its prompts cost about one token a word,
# near the 4-bytes-a-token convention the scenarios count in (a prompt of "2048 tokens" fits a 4096 context).
PROMPT_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no will more can "
    "out up other into time only some could new them these than first two may then do any like my "
    "now over such our man me even most made after also did many before must through back years "
    "where much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used "
    "take three queue token batch cache tier model serve route agent tool step stream "
)
CORPUS = """\
The quick brown fox jumps over the lazy dog. A request waits in the queue until the scheduler
admits it; interactive users expect the first token quickly, batch jobs can wait. When the queue
is full the server turns new arrivals away, and a load test has to count every one of them.
0 1 2 3 4 5 6 7 8 9 a b c d e f [ ] {"role": "user", "content": "hello"}
""" + " ".join(PROMPT_WORDS.split() * 8)
SPECIAL = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def build_tokenizer(out: Path) -> int:
    """Train a byte-level BPE on the embedded text and save it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>",
                                   pad_token="<|pad|>", model_max_length=8192)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return len(fast)


def build_model(out: Path, vocab: int, bos: int, eos: int, pad: int) -> None:
    """A 2-layer Llama with random (seeded) weights, saved as safetensors.

    head_dim is 64: vLLM's CPU attention rejects small head sizes ("Unsupported CPU attention
    configuration: head_dim=16").
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=bos, eos_token_id=eos, pad_token_id=pad, tie_word_embeddings=False,
                         torch_dtype="float32")
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out), safe_serialization=True)
    GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad).save_pretrained(str(out))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: tiny_model.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[1])
    stamp = out / "rushhour-tiny-model.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("version") == VERSION:
        print(out)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    vocab = build_tokenizer(out)
    ids = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    build_model(out, vocab, ids["<|bos|>"], ids["<|eos|>"], ids["<|pad|>"])
    stamp.write_text(json.dumps({"version": VERSION, "seed": SEED, "vocab": vocab}) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
