"""Tiny Llama-style model for transformers: vocab 7 (a-f, </s>), 1 layer, hidden 16."""

from __future__ import annotations

import hashlib
from typing import Any

from badc_trace.tiny import DEFAULT_PROMPT, normal

DEFAULT_SEED = 7  # after the default prompt, every token has visible mass at the first step
VOCAB = ["a", "b", "c", "d", "e", "f", "</s>"]
EOS_ID = 6
INITIALIZER_RANGE = 0.2


def build_tokenizer() -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="</s>"))
    # One token per character; `Fuse` joins them back without separators.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="</s>")


def config() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(VOCAB), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=INITIALIZER_RANGE, eos_token_id=EOS_ID, pad_token_id=EOS_ID, bos_token_id=None,
        tie_word_embeddings=False,
    )


def build(seed: int) -> tuple[Any, Any]:
    """(model, tokenizer) for `tiny:SEED`, in fp32 and eval mode."""
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # only for buffers transformers initialises itself; weights follow
        model = LlamaForCausalLM(config())
    state = {}
    for i, (name, tensor) in enumerate(sorted(model.state_dict().items())):
        if name.endswith("norm.weight"):
            state[name] = torch.ones_like(tensor)
        elif tensor.dim() == 2:
            state[name] = torch.from_numpy(normal(seed, tuple(tensor.shape), INITIALIZER_RANGE, i))
        else:
            state[name] = tensor
    model.load_state_dict(state)
    model.generation_config = GenerationConfig(eos_token_id=EOS_ID, pad_token_id=EOS_ID)
    tok = build_tokenizer()
    # the model spec, so a trace of a program that built it names what replay loads again
    model.name_or_path = tok.name_or_path = f"tiny:{seed}"
    return model.eval(), tok


def weights_digest(model: Any) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def first_step_distribution(seed: int, prompt: str = DEFAULT_PROMPT) -> dict[str, float]:
    """The model's exact next-token law after the prompt, computed by the engine's forward pass."""
    import torch

    model, tok = build(seed)
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits[0, -1].double()
    probs = torch.softmax(logits, -1).tolist()
    return {VOCAB[i]: p for i, p in enumerate(probs)}
