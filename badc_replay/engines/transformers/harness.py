"""Harness: one configuration on one model, `draw(seed)` as a user runs `generate()` (live)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from badc_replay.engines.transformers.config import TransformersConfig
from badc_trace.outcomes import format_outcome


def _pretrained(spec: str) -> tuple[str, dict[str, str]]:
    """from_pretrained's folder and file keywords for a non-tiny model: a named checkpoint or a path (a
    folder, or a GGUF file: `gguf_file`; transformers needs the gguf package for it)."""
    import os

    from badc_trace.checkpoints import resolve_model

    path = resolve_model(spec)
    if path.endswith(".gguf"):
        folder, name = os.path.split(path)
        return folder, {"gguf_file": name}
    return path, {}


def load_model(spec: str) -> tuple[Any, Any]:
    from badc_trace.tiny import parse_model_spec
    from badc_trace.tiny import transformers as tiny

    seed = parse_model_spec("transformers", spec)
    if seed is not None:
        return tiny.build(seed)
    return load_pretrained("model", *_pretrained(spec)), load_tokenizer(spec)


def load_pretrained(kind: str, path: str, load: Mapping[str, str]) -> Any:
    """A model (weights only: no tokenizer) or tokenizer from its folder, loaded the way the program or the
    campaign loaded it (`load`: from_pretrained's file keywords, LOAD_KEYS only). A trace is data: never
    remote code; a GGUF file is dequantized to float32 (a named checkpoint's once, into its folder)."""
    import os

    from badc_trace.checkpoints import checkpoint_of, hf_folder
    from badc_trace.portable import LOAD_KEYS

    kw: dict[str, Any] = {k: v for k, v in load.items() if k in LOAD_KEYS and isinstance(v, str)}
    name = checkpoint_of(os.path.join(path, kw["gguf_file"])) if set(kw) == {"gguf_file"} else None
    if name is not None:
        # A named checkpoint's GGUF, dequantized once into a float32 folder (hf_folder) by this same
        # loader: the same tensors, config, generation config and tokenizer, logits equal bit for bit
        # (checked on SmolLM2), loaded in 0.6 s instead of 16 s; a replay loads its model again.
        path, kw = hf_folder(name), {}
    if kind == "tokenizer":
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, trust_remote_code=False, **kw)
    import torch
    from transformers import AutoModelForCausalLM

    if "gguf_file" in kw:
        kw["dtype"] = torch.float32
    return AutoModelForCausalLM.from_pretrained(path, trust_remote_code=False, **kw).eval()


def load_tokenizer(spec: str) -> Any:
    from badc_trace.tiny import parse_model_spec
    from badc_trace.tiny import transformers as tiny

    if parse_model_spec("transformers", spec) is not None:
        return tiny.build_tokenizer()
    return load_pretrained("tokenizer", *_pretrained(spec))


def prompt_ids(cfg: TransformersConfig, tok: Any) -> list[int]:
    """The prompt's ids: given as ids, or the text tokenized; with `chat`, the text as a user message through
    the tokenizer's chat template with the generation prompt (as a chat user calls generate())."""
    if isinstance(cfg.prompt, list):
        return [int(t) for t in cfg.prompt]
    if cfg.chat:
        text = tok.apply_chat_template([{"role": "user", "content": cfg.prompt}], add_generation_prompt=True,
                                       tokenize=False)
        return [int(t) for t in tok(text, add_special_tokens=False).input_ids]
    return [int(t) for t in tok(cfg.prompt).input_ids]


def _generation_kwargs(cfg: TransformersConfig, tokenizer: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {"do_sample": True, "max_new_tokens": cfg.max_new_tokens}
    for k, v in cfg.generation.items():
        if k == "watermarking_config" and isinstance(v, Mapping) and v.get("type") == "synthid":
            from transformers import SynthIDTextWatermarkingConfig

            v = SynthIDTextWatermarkingConfig(**{a: b for a, b in v.items() if a != "type"})
        elif k == "sequence_bias":
            v = {tuple(int(t) for t in ids): float(b) for ids, b in v}
        kw[k] = v
    if kw.get("stop_strings"):
        kw["tokenizer"] = tokenizer
    return kw


def _compile_grammars(cfg: TransformersConfig, tokenizer: Any, model: Any) -> list[Any]:
    compiled = []
    for p in cfg.processors:
        import xgrammar as xgr

        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
        compiled.append(xgr.GrammarCompiler(info).compile_grammar(p["grammar"]))
    return compiled


def prompt_lookup_kwargs(cfg: TransformersConfig) -> dict[str, Any]:
    """generate()'s keywords for the config's prompt-lookup drafter."""
    d = cfg.drafter
    return {"prompt_lookup_num_tokens": int(d.get("num_tokens", 3)),
            "max_matching_ngram_size": int(d.get("max_ngram_size", 2))}


def draft_model_kwargs(cfg: TransformersConfig) -> dict[str, Any]:
    """generate()'s keywords for the config's draft-model drafter: the assistant, loaded, with the draft
    length, schedule and confidence threshold set on its generation config."""
    d = cfg.drafter
    assistant, _ = load_model(d.get("model", "tiny:11"))
    gc = assistant.generation_config
    if "num_assistant_tokens" in d:
        gc.num_assistant_tokens = int(d["num_assistant_tokens"])
        gc.num_assistant_tokens_schedule = "constant"
    gc.num_assistant_tokens_schedule = d.get("schedule", gc.num_assistant_tokens_schedule)
    if "confidence_threshold" in d:
        gc.assistant_confidence_threshold = float(d["confidence_threshold"])
    return {"assistant_model": assistant}


class Harness:
    """Runs one configuration: `draw(seed)` -> outcome string."""

    def __init__(self, cfg: TransformersConfig, speculative: bool):
        import torch

        self.cfg, self.speculative = cfg, speculative
        if str(cfg.model).startswith("tiny"):
            torch.set_num_threads(1)  # tiny models: threads only contend with the other workers
        self.model, self.tok = load_model(cfg.model)
        self.repair_target = self.model  # what a frozen repair patches
        self.prompt = prompt_ids(cfg, self.tok)
        self.input_ids = torch.tensor([self.prompt])
        self.kwargs = _generation_kwargs(cfg, self.tok)
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos])
        self.grammars = _compile_grammars(cfg, self.tok, self.model)
        self.spec_kwargs: dict[str, Any] = {}
        if speculative:
            d = cfg.drafter
            if d["method"] == "prompt_lookup":
                self.spec_kwargs = prompt_lookup_kwargs(cfg)
            else:
                self.spec_kwargs = draft_model_kwargs(cfg)

    def call_kwargs(self) -> dict[str, Any]:
        """generate() keywords for one request; third-party processors are made fresh for each
        (xgrammar's keeps matcher state), from grammars compiled once."""
        kw = {**self.kwargs, **self.spec_kwargs}
        if self.grammars:
            from transformers import LogitsProcessorList
            from xgrammar.contrib.hf import LogitsProcessor as XgrProcessor

            kw["logits_processor"] = LogitsProcessorList([XgrProcessor(g) for g in self.grammars])
        return kw

    def outcome(self, out: Any) -> str:
        from badc_trace.engines.transformers import outcome_of

        seqs = out.sequences if hasattr(out, "sequences") else out
        return outcome_of([int(t) for t in seqs[0, len(self.prompt):].tolist()], self.eos, self.cfg.max_new_tokens)

    def scripted(self, multinomial: Callable[..., Any]) -> str:
        """One generate() with `torch.multinomial` replaced by `multinomial` (the exact laws' only scripted
        draw): its outcome, a crash outcome, or the enumeration's Branch raised through."""
        import torch

        from badc_replay.enumeration import Branch

        original = torch.multinomial
        torch.multinomial = multinomial
        try:
            with torch.no_grad():
                out = self.model.generate(self.input_ids, **self.call_kwargs())
        except Branch:
            raise
        except Exception as e:
            return format_outcome([], f"crash:{type(e).__name__}")
        finally:
            torch.multinomial = original
        return self.outcome(out)

    def draw(self, seed: int) -> str:
        import torch

        torch.random.default_generator.manual_seed(seed)  # ~100x faster than torch.manual_seed
        try:
            with torch.no_grad():
                out = self.model.generate(self.input_ids, **self.call_kwargs())
        except Exception as e:  # raised to the caller: a crash outcome
            return format_outcome([], f"crash:{type(e).__name__}")
        return self.outcome(out)
