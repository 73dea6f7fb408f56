"""Tiny Qwen2 for vLLM: vocab 16 (or 8: `tiny:SEED:v8`, the paper's RQ4 size), 1 layer, hidden 64,
head_dim 32, WordLevel tokenizer."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from badc_trace.files import replacing
from badc_trace.tiny import DEFAULT_PROMPT, cache_dir, normal

DEFAULT_SEED = 1  # after the default prompt, every token has visible mass at the first step
VOCAB_SIZES = (16, 8)  # the first is the default


def vocabulary(size: int = 16) -> list[str]:
    """Letters, then <unk> and </s> (EOS, the last id)."""
    return [chr(ord("a") + i) for i in range(size - 2)] + ["<unk>", "</s>"]


VOCAB = vocabulary()
EOS_ID = 15
HIDDEN, INTERMEDIATE, HEADS, HEAD_DIM = 64, 128, 2, 32  # the CPU attention accepts head_dim 32
STD = 0.08  # larger makes the model near-deterministic at this width
_FORMAT = 1


def _config(size: int) -> dict[str, Any]:
    eos = size - 1
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": size,
        "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": 1,
        "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HEAD_DIM,
        "max_position_embeddings": 256, "max_window_layers": 1, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "torch_dtype": "float32", "use_sliding_window": False, "bos_token_id": eos,
        "eos_token_id": eos, "pad_token_id": eos, "initializer_range": STD,
    }


def _tensors(seed: int, size: int) -> dict[str, Any]:
    import numpy as np

    q = HEADS * HEAD_DIM
    shapes = [
        ("model.embed_tokens.weight", (size, HIDDEN)),
        ("model.layers.0.input_layernorm.weight", (HIDDEN,)),
        ("model.layers.0.self_attn.q_proj.weight", (q, HIDDEN)),
        ("model.layers.0.self_attn.q_proj.bias", (q,)),
        ("model.layers.0.self_attn.k_proj.weight", (q, HIDDEN)),
        ("model.layers.0.self_attn.k_proj.bias", (q,)),
        ("model.layers.0.self_attn.v_proj.weight", (q, HIDDEN)),
        ("model.layers.0.self_attn.v_proj.bias", (q,)),
        ("model.layers.0.self_attn.o_proj.weight", (HIDDEN, q)),
        ("model.layers.0.post_attention_layernorm.weight", (HIDDEN,)),
        ("model.layers.0.mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN)),
        ("model.layers.0.mlp.up_proj.weight", (INTERMEDIATE, HIDDEN)),
        ("model.layers.0.mlp.down_proj.weight", (HIDDEN, INTERMEDIATE)),
        ("model.norm.weight", (HIDDEN,)),
        ("lm_head.weight", (size, HIDDEN)),
    ]
    out = {}
    for i, (name, shape) in enumerate(shapes):
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            out[name] = np.zeros(shape, np.float32)
        else:
            out[name] = normal(seed, shape, STD, i)
    return out


def _tokenizer_json(size: int) -> dict[str, Any]:
    vocab = vocabulary(size)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(vocab) if "<" in t],
        "normalizer": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "."}, "behavior": "Isolated",
                          "invert": False},
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(vocab)}, "unk_token": "<unk>"},
    }


def write_model_dir(seed: int, path: str | os.PathLike[str], size: int = 16) -> None:
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(_config(size), indent=1, sort_keys=True))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": size - 1, "pad_token_id": size - 1}))
    save_file(_tensors(seed, size), str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "tokenizer.json").write_text(json.dumps(_tokenizer_json(size), indent=1))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>", "pad_token": "</s>",
        "unk_token": "<unk>", "model_max_length": 256, "clean_up_tokenization_spaces": False}))


def model_path(seed: int, size: int = 16) -> Path:
    """The model folder for `tiny:SEED` (`tiny:SEED:vSIZE`), written once into the cache (atomically) and
    reused."""
    path = cache_dir() / (f"vllm-v{_FORMAT}-{seed}" + ("" if size == 16 else f"-v{size}"))
    if not path.exists():
        with replacing(path) as tmp:  # another process may win the race: its folder is identical
            write_model_dir(seed, tmp, size)
    return path


def dir_digest(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    for f in sorted(Path(path).iterdir()):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def llm(model: str, **kwargs: Any) -> Any:
    """An in-process `vllm.LLM` on the CPU backend as badc runs every model: float32, eager, a 1 GB KV
    cache and half the memory share (vLLM's default 0.92 is more than a busy machine has free); `kwargs`
    override these."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM

    return LLM(model=model, **{"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.5, **kwargs})


def load(seed: int, size: int = 16, **kwargs: Any) -> Any:
    """An in-process `vllm.LLM` on the tiny model."""
    return llm(str(model_path(seed, size)), **{"max_model_len": 64, "seed": 0, "max_num_seqs": 256, **kwargs})


def first_step_distribution(seed: int, prompt: str = DEFAULT_PROMPT, llm: Any = None) -> dict[str, float]:
    import math

    from vllm import SamplingParams

    llm = llm or load(seed)
    out = llm.generate([prompt], SamplingParams(max_tokens=1, temperature=1.0, logprobs=len(VOCAB)),
                       use_tqdm=False)
    lps = out[0].outputs[0].logprobs[0]
    return {VOCAB[tid]: math.exp(lp.logprob) for tid, lp in sorted(lps.items())}
