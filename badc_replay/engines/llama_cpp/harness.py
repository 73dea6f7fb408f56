"""Harness: one configuration, one engine instance per arm, `draw(seed)` as a user calls it (live)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from badc_replay.engines.llama_cpp.config import LlamaConfig
from badc_replay.engines.llama_cpp.features import make_processors, make_stopping
from badc_trace.outcomes import format_outcome


def load_llama(cfg: LlamaConfig, **kwargs: Any) -> Any:
    """A Llama on the config's model: the embedded tiny model ("tiny", "tiny:SEED"), a named checkpoint
    ("smollm2") or a GGUF path."""
    from badc_trace.checkpoints import resolve_model
    from badc_trace.tiny import llama_cpp as tiny
    from badc_trace.tiny import parse_model_spec

    seed = parse_model_spec("llama_cpp", cfg.model)
    if seed is not None:
        return tiny.load(seed, **kwargs)
    from llama_cpp import Llama

    return Llama(model_path=resolve_model(cfg.model), n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False,
                 **kwargs)


def prompt_ids(cfg: LlamaConfig, llm: Any) -> list[int]:
    """The prompt's token ids: given as ids, or the text tokenized; with `chat`, the text as a user message
    through the model's chat template (llama_chat_format's Jinja2ChatFormatter, as create_chat_completion)."""
    if isinstance(cfg.prompt, list):
        return list(cfg.prompt)
    text = cfg.prompt
    if cfg.chat:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ValueError(f"config {cfg.id}: key 'chat': model {cfg.model!r} has no tokenizer.chat_template")

        def piece(token: int) -> str:
            return llm.detokenize([token]).decode(errors="ignore")

        render = Jinja2ChatFormatter(template=template, eos_token=piece(llm.token_eos()),
                                     bos_token=piece(llm.token_bos()))
        text = render(messages=[{"role": "user", "content": text}]).prompt
    return llm.tokenize(text.encode(), add_bos=False, special=cfg.chat)


class Harness:
    """Runs one configuration on one Llama instance and returns outcome strings."""

    def __init__(self, cfg: LlamaConfig, speculative: bool):
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.cfg = cfg
        draft = None
        if speculative:
            draft = LlamaPromptLookupDecoding(num_pred_tokens=int(cfg.drafter.get("num_pred_tokens", 10)),
                                              max_ngram_size=int(cfg.drafter.get("max_ngram_size", 2)))
        # logprobs need logits_all (create_completion refuses otherwise); a draft model forces it anyway.
        self.llm = load_llama(cfg, draft_model=draft, logits_all=cfg.sampling.get("logprobs") is not None)
        self.repair_target = self.llm  # what a frozen repair patches
        self.prompt_tokens = prompt_ids(cfg, self.llm)
        self.yielded: list[int] = []
        self.generator_returned = False
        self.in_generate = False
        self._wrap_generate()

    def _wrap_generate(self) -> None:
        # Records the ids generate() yields on this instance only (no global patching): the returned
        # ids of create_completion are a prefix of them (usage.completion_tokens).
        from badc_trace.engines.llama_cpp import tracked

        original = self.llm.generate
        self.llm.generate = lambda *args, **kwargs: tracked(self, original(*args, **kwargs))

    def call(self, seed: int, wrap_stop: Callable[[Callable], Callable] | None = None) -> str:
        """One draw with fresh processors and stopping criteria; returns the outcome string."""
        from llama_cpp.llama import LogitsProcessorList, StoppingCriteriaList

        cfg, llm = self.cfg, self.llm
        from llama_cpp.llama_grammar import LlamaGrammar

        procs = LogitsProcessorList(make_processors(cfg.processors, llm.token_eos())) if cfg.processors else None
        grammar = LlamaGrammar.from_string(cfg.grammar, verbose=False) if cfg.grammar else None
        stops = None
        if cfg.stopping:
            crits = make_stopping(cfg.stopping)
            stops = StoppingCriteriaList([wrap_stop(c) for c in crits] if wrap_stop else crits)
        params = cfg.params()
        if cfg.api == "generate":
            llm.set_seed(seed)
            toks: list[int] = []
            code = "stop"
            for tok in llm.generate(self.prompt_tokens, top_k=params["top_k"], top_p=params["top_p"],
                                    min_p=params["min_p"], typical_p=params["typical_p"], temp=params["temperature"],
                                    repeat_penalty=params["repeat_penalty"],
                                    frequency_penalty=params["frequency_penalty"],
                                    presence_penalty=params["presence_penalty"], logits_processor=procs,
                                    stopping_criteria=stops, grammar=grammar):
                if tok == llm.token_eos():
                    code = "eos"
                    break
                toks.append(int(tok))
                if len(toks) >= cfg.max_new_tokens:
                    code = "length"
                    break
            return format_outcome(toks, code)
        kwargs = {k: v for k, v in cfg.sampling.items() if k != "seed"}
        if "logit_bias" in kwargs:
            kwargs["logit_bias"] = {int(k): float(v) for k, v in kwargs["logit_bias"].items()}
        out = llm.create_completion(self.prompt_tokens, max_tokens=cfg.max_new_tokens, seed=seed,
                                    logits_processor=procs, stopping_criteria=stops, grammar=grammar, **{
                                        **{k: v for k, v in params.items()}, **kwargs})
        choice = out["choices"][0]
        n = out["usage"]["completion_tokens"]
        return format_outcome(self.yielded[:n], choice["finish_reason"] or "none")

    def draw(self, seed: int) -> str:
        """One draw as the caller sees it, with a processor exception (swallowed by ctypes, so the
        completion goes on) turned into a crash outcome when the probe is installed."""
        from badc_trace.engines.llama_cpp import LlamaCppInstrumentor

        probe = LlamaCppInstrumentor()
        try:
            outcome = self.call(seed)
        except Exception as e:  # an exception raised to the caller is a crash outcome too
            return format_outcome([], f"crash:{type(e).__name__}")
        last = probe.last_request if probe.is_instrumented else None
        if last is not None and last.crash:
            return format_outcome([], f"crash:{last.crash}")
        return outcome
