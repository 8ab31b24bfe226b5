"""GPU/model performance presets for the simulated replicas.

Step time model (one engine step = one decode token for every running sequence plus a slice of
prefill): step_s = base_s + per_seq_s * decode_seqs + per_kv_token_s * kv_tokens_in_use
                  + prefill_per_token_s * prefill_tokens.
Each number carries its source; "assumed" marks a round guess of the right order of magnitude.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    """Performance and capacity numbers for one replica."""

    name: str
    model: str
    max_num_seqs: int
    kv_capacity_tokens: int
    max_num_batched_tokens: int
    base_s: float
    per_seq_s: float
    per_kv_token_s: float
    prefill_per_token_s: float
    block_tokens: int = 16  # vLLM default block size (vllm CacheConfig.block_size)


PRESETS: dict[str, Preset] = {
    # Llama-3.1-8B BF16 on one H100 80GB SXM.
    "h100-llama8b": Preset(
        name="h100-llama8b",
        model="meta-llama/Llama-3.1-8B-Instruct",
        max_num_seqs=256,  # vLLM default --max-num-seqs
        # KV/token = 2*32 layers*8 kv heads*128 dim*2 B = 128 KiB; ~56 GB free at 0.9 util -> ~430k (derived)
        kv_capacity_tokens=430_000,
        max_num_batched_tokens=8192,  # vLLM V1 chunked-prefill budget for online serving (assumed)
        base_s=0.0055,  # 16 GB weights / 3.35 TB/s HBM3 = 4.8 ms + launch overhead (derived)
        per_seq_s=0.00004,  # sampling + scheduler overhead per sequence (assumed)
        per_kv_token_s=3.9e-8,  # 128 KiB read per cached token / 3.35 TB/s (derived)
        prefill_per_token_s=4.0e-5,  # 16 GFLOP/token at ~40% of 989 TFLOPS -> ~25k tok/s (assumed MFU)
    ),
    # Llama-3.1-70B BF16, tensor parallel 4 on A100 80GB SXM.
    "a100-llama70b-tp4": Preset(
        name="a100-llama70b-tp4",
        model="meta-llama/Llama-3.1-70B-Instruct",
        max_num_seqs=256,  # vLLM default --max-num-seqs
        # KV/token = 2*80 layers*8 kv heads*128 dim*2 B = 320 KiB; ~148 GB free over 4 GPUs (derived)
        kv_capacity_tokens=450_000,
        max_num_batched_tokens=8192,  # (assumed, as above)
        base_s=0.022,  # 35 GB weights per GPU / 2.0 TB/s = 17.5 ms + all-reduce (derived + assumed)
        per_seq_s=0.00008,  # (assumed)
        per_kv_token_s=4.0e-8,  # 80 KiB per GPU per token / 2.0 TB/s (derived)
        prefill_per_token_s=2.2e-4,  # 140 GFLOP/token at ~50% of 4*312 TFLOPS -> ~4.5k tok/s (assumed MFU)
    ),
    # Llama-3.1-8B BF16 on one NVIDIA L4 24GB: a small inference GPU that saturates at laptop-sized
    # load, so the demo shows queues and drops without needing thousands of client streams.
    "l4-llama8b": Preset(
        name="l4-llama8b",
        model="meta-llama/Llama-3.1-8B-Instruct",
        max_num_seqs=16,  # small batch for a 24 GB card (assumed)
        # KV/token 128 KiB; 24 GB - 16 GB weights - ~2 GB activations/overheads = ~6 GB -> ~48k (derived)
        kv_capacity_tokens=48_000,
        max_num_batched_tokens=2048,  # (assumed)
        base_s=0.055,  # 16 GB weights / 300 GB/s GDDR6 = 53 ms per decode step (derived)
        per_seq_s=0.0002,  # (assumed)
        per_kv_token_s=4.4e-7,  # 128 KiB per cached token / 300 GB/s (derived)
        prefill_per_token_s=3.3e-4,  # 16 GFLOP/token at ~40% of 121 TFLOPS FP16 -> ~3k tok/s (assumed MFU)
    ),
    # Tiny replica for fast tests: few slots, little KV, millisecond steps (all assumed).
    "tiny": Preset(
        name="tiny",
        model="testbed",
        max_num_seqs=4,
        kv_capacity_tokens=4096,
        max_num_batched_tokens=2048,
        base_s=0.002,
        per_seq_s=0.0002,
        per_kv_token_s=1.0e-7,
        prefill_per_token_s=1.0e-5,
    ),
}


def get_preset(name: str) -> Preset:
    """Look up a preset by name, naming the known ones on error."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(sorted(PRESETS))})") from None
