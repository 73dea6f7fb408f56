"""Tiny GGUF llama for llama-cpp-python: vocab 10 (<unk>, <s>, </s>, a-g), 1 layer, width 16, fp32."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from badc_trace.files import replacing
from badc_trace.tiny import DEFAULT_PROMPT, cache_dir, normal

DEFAULT_SEED = 3  # after the default prompt, every token has visible mass at the first step
VOCAB = ["<unk>", "<s>", "</s>", "a", "b", "c", "d", "e", "f", "g"]
BOS_ID, EOS_ID = 1, 2
N_EMBD, N_FF, N_HEAD, N_CTX = 16, 32, 2, 256
STD = 0.2
_FORMAT = 1  # bump when the layout below changes, so cached files are rebuilt


def _tensors(seed: int) -> list[tuple[str, Any]]:
    import numpy as np

    shapes = [  # PyTorch order (rows, cols); gguf reverses them into ggml's order
        ("token_embd.weight", (len(VOCAB), N_EMBD)),
        ("blk.0.attn_norm.weight", (N_EMBD,)),
        ("blk.0.attn_q.weight", (N_EMBD, N_EMBD)),
        ("blk.0.attn_k.weight", (N_EMBD, N_EMBD)),
        ("blk.0.attn_v.weight", (N_EMBD, N_EMBD)),
        ("blk.0.attn_output.weight", (N_EMBD, N_EMBD)),
        ("blk.0.ffn_norm.weight", (N_EMBD,)),
        ("blk.0.ffn_gate.weight", (N_FF, N_EMBD)),
        ("blk.0.ffn_up.weight", (N_FF, N_EMBD)),
        ("blk.0.ffn_down.weight", (N_EMBD, N_FF)),
        ("output_norm.weight", (N_EMBD,)),
        ("output.weight", (len(VOCAB), N_EMBD)),
    ]
    return [(name, np.ones(shape, np.float32) if len(shape) == 1 else normal(seed, shape, STD, i))
            for i, (name, shape) in enumerate(shapes)]


def write_gguf(seed: int, path: str | os.PathLike[str]) -> None:
    import gguf

    w = gguf.GGUFWriter(os.fspath(path), "llama")
    w.add_name(f"badc-tiny-{seed}")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(len(VOCAB))
    w.add_tokenizer_model("llama")
    w.add_token_list(VOCAB)
    w.add_token_scores([0.0] * len(VOCAB))
    w.add_token_types([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
                      + [gguf.TokenType.NORMAL] * (len(VOCAB) - 3))
    w.add_unk_token_id(0)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(False)
    w.add_add_space_prefix(False)
    for name, array in _tensors(seed):
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def model_path(seed: int) -> Path:
    """The GGUF file for `tiny:SEED`, written once into the cache (atomically) and reused."""
    path = cache_dir() / f"llama_cpp-v{_FORMAT}-{seed}.gguf"
    if not path.exists():
        with replacing(path) as tmp:
            write_gguf(seed, tmp)
    return path


def file_digest(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load(seed: int, **kwargs: Any) -> Any:
    from llama_cpp import Llama

    opts = dict(n_ctx=N_CTX, n_threads=1, n_threads_batch=1, verbose=False, seed=0)
    opts.update(kwargs)
    return Llama(model_path=str(model_path(seed)), **opts)


def first_step_distribution(seed: int, prompt: str = DEFAULT_PROMPT) -> dict[str, float]:
    import numpy as np

    llm = load(seed, logits_all=True)  # scores rows are filled only with logits_all in 0.3.36
    ids = llm.tokenize(prompt.encode(), add_bos=False, special=False)
    llm.eval(ids)
    logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return {VOCAB[i]: float(v) for i, v in enumerate(p)}
