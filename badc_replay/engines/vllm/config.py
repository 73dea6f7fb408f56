"""The vllm part of a campaign config, strict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from typing_extensions import TypedDict

from badc_replay.validation import strict

MIRRORED_SAMPLING = {"temperature", "top_k", "top_p", "min_tokens", "stop_token_ids", "allowed_token_ids",
                     "bad_words", "stop", "include_stop_str_in_output",
                     "structured_outputs",  # a regex only (grammar.py)
                     "logprobs", "prompt_logprobs"}  # records (channel R): they leave the law as it is
RECORD_TOLERANCE = 1e-4  # a returned logprob against the kernel's (float32 logits of other batch shapes)
MAX_PREFIXES = 200_000  # prefixes the kernel may query; the tiny model at horizon 4 needs about 4,400
BATCH = 500  # draws per generate() call: vLLM batches them; progress is shown between calls
TEMPERATURE_TOLERANCE = 1e-3  # relative; a temperature measured from float32 logits


@pydantic.with_config(pydantic.ConfigDict(extra="forbid", strict=True))
class VllmDrafter(TypedDict, total=False):
    """`speculative_config` keywords of the ngram proposer."""

    method: Literal["ngram"]
    num_speculative_tokens: Annotated[int, pydantic.Field(ge=1)]
    prompt_lookup_max: Annotated[int, pydantic.Field(ge=1)]
    prompt_lookup_min: Annotated[int, pydantic.Field(ge=1)]


@strict
class VllmConfig:
    """The vllm part of a campaign config (docs/interfaces.md, "Campaign file"); `sampling` holds
    `SamplingParams` keywords (checked against the installed vLLM's, `check_native`), `max_new_tokens`
    is `max_tokens`."""

    id: str
    model: str = "tiny"
    prompt: str | list[int] = "abcdabcdab"
    max_new_tokens: Annotated[int, pydantic.Field(ge=1)] = 4
    drafter: VllmDrafter = field(default_factory=lambda: {"method": "ngram", "num_speculative_tokens": 3,
                                                          "prompt_lookup_max": 2, "prompt_lookup_min": 1})
    sampling: dict[str, Any] = field(default_factory=dict)
    # true: each draw is a request with its own `SamplingParams.seed` (vLLM samples it with a per-request
    # generator); false: unseeded requests, sampled from the engine's shared generator, which is seeded
    # from the first draw's seed of each batch (the other code path of vLLM's samplers)
    seeded: bool = True

    def __post_init__(self) -> None:
        from badc_trace.tiny import ModelSpecError, parse_model_spec

        if "seed" in self.sampling or "max_tokens" in self.sampling:
            raise ValueError("sampling must not set seed (each draw has its own) or max_tokens (use max_new_tokens)")
        try:
            parse_model_spec("vllm", self.model)
        except ModelSpecError as e:
            raise ValueError(f"key 'model': {e}") from None

    @property
    def model_path(self) -> str:
        """The folder of a model that is not a tiny one: a named checkpoint's (made once from its GGUF,
        badc_trace/checkpoints.py), or the folder given."""
        from badc_trace.checkpoints import hf_folder

        return hf_folder(self.model)

    @property
    def min_tokens(self) -> int:
        return int(self.sampling.get("min_tokens", 0))

    @property
    def eos_id(self) -> int:
        return _eos(self)

    @property
    def stop_ids(self) -> frozenset[int]:
        """EOS and `stop_token_ids`: what min_tokens masks and what ends a request."""
        return frozenset({*self.sampling.get("stop_token_ids", ()), _eos(self)})

    def prompt_ids(self, llm: Any) -> list[int]:
        return list(self.prompt) if isinstance(self.prompt, list) else \
            llm.get_tokenizer().encode(self.prompt, add_special_tokens=False)

    @property
    def records(self) -> bool:
        """Whether requests ask for logprobs or prompt logprobs (channel R)."""
        return any(self.sampling.get(k) is not None for k in ("logprobs", "prompt_logprobs"))

    @property
    def stop_strings(self) -> list[str]:
        """`stop` as a list (vLLM takes one string or a list)."""
        stop = self.sampling.get("stop") or []
        return [stop] if isinstance(stop, str) else list(stop)

    def decoder(self) -> Callable[[Sequence[int]], str]:
        """Offline: output ids -> the text vLLM's detokenizer gives them (special tokens skipped), from the
        tiny model's vocabulary or the model folder's tokenizer.json (needs the `tokenizers` package)."""
        from badc_trace.tiny import parse_model_spec, vocab_size
        from badc_trace.tiny import vllm as tiny

        if parse_model_spec("vllm", self.model) is not None:
            pieces = ["" if t.startswith("<") else t for t in tiny.vocabulary(vocab_size("vllm", self.model))]
            return lambda ids: "".join(pieces[i] for i in ids)
        try:
            from tokenizers import Tokenizer
        except ImportError as e:
            raise ValueError(f"config {self.id}: the text of outputs of {self.model} needs the `tokenizers` "
                             "package in this environment (pip install tokenizers)") from e
        tok = Tokenizer.from_file(str(Path(self.model_path) / "tokenizer.json"))
        return lambda ids: tok.decode(list(ids), skip_special_tokens=True)

    @property
    def allowed(self) -> frozenset[int] | None:
        """`allowed_token_ids` (None: every token)."""
        ids = self.sampling.get("allowed_token_ids")
        return frozenset(int(t) for t in ids) if ids else None

    def bad_words_ids(self, tokenizer: Any) -> list[tuple[int, ...]]:
        """`bad_words` as the token sequences vLLM bans (as the probe records them)."""
        from badc_trace.engines.vllm import bad_words_token_ids

        if not self.sampling.get("bad_words"):
            return []
        return [tuple(w) for w in bad_words_token_ids(self.params(), tokenizer)]

    @property
    def temperature(self) -> float:
        return float(self.sampling.get("temperature", 1.0))

    @property
    def top_k(self) -> int | None:
        k = int(self.sampling.get("top_k") or 0)
        return k if k > 0 else None  # 0 and -1: every token, as vLLM

    @property
    def top_p(self) -> float | None:
        p = float(self.sampling.get("top_p", 1.0))
        return p if p < 1.0 else None

    @property
    def regex(self) -> str | None:
        """The `structured_outputs` regex, if the config constrains outputs with one."""
        return (self.sampling.get("structured_outputs") or {}).get("regex")

    def params(self, seed: int | None = None, skip_clone: bool = False) -> Any:
        from vllm import SamplingParams

        sampling = dict(self.sampling)
        if isinstance(sampling.get("structured_outputs"), dict):
            from vllm.sampling_params import StructuredOutputsParams

            sampling["structured_outputs"] = StructuredOutputsParams(**sampling["structured_outputs"])
        return SamplingParams(max_tokens=self.max_new_tokens, seed=seed, **sampling,
                              **({"skip_clone": True} if skip_clone else {}))

    def speculative_config(self) -> dict[str, Any]:
        d = {k: v for k, v in self.drafter.items() if k != "method"}
        return {"method": "ngram", **d}


def _eos(cfg: VllmConfig) -> int:
    from badc_trace.tiny import parse_model_spec, vocab_size

    if parse_model_spec("vllm", cfg.model) is not None:
        return vocab_size("vllm", cfg.model) - 1  # the tiny vocabularies end with </s>
    import json

    return int(json.loads((Path(cfg.model_path) / "config.json").read_text())["eos_token_id"])
