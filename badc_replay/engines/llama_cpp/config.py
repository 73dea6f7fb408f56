"""The llama_cpp part of a campaign config, strict."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal, Required

import pydantic
from typing_extensions import TypedDict

from badc_replay.engines.llama_cpp.sampler import CREATE_COMPLETION_DEFAULTS
from badc_replay.validation import strict


@pydantic.with_config(pydantic.ConfigDict(extra="forbid", strict=True))
class LlamaDrafter(TypedDict, total=False):
    """`LlamaPromptLookupDecoding` keywords (llama_speculative.py)."""

    method: Literal["prompt_lookup"]
    num_pred_tokens: Annotated[int, pydantic.Field(ge=1)]  # llama-cpp-python's default: 10
    max_ngram_size: Annotated[int, pydantic.Field(ge=1)]


@pydantic.with_config(pydantic.ConfigDict(extra="forbid", strict=True))
class LlamaSampling(TypedDict, total=False):
    """The `create_completion` keywords the kernel mirrors (`mirror_chain`) or checks (logprobs)."""

    temperature: Annotated[float, pydantic.Field(ge=0, allow_inf_nan=False)]
    top_k: int
    top_p: float
    min_p: float
    typical_p: float
    repeat_penalty: float
    frequency_penalty: float
    presence_penalty: float
    logit_bias: dict[str, float]
    stop: str | list[str]
    seed: int
    logprobs: int


@pydantic.with_config(pydantic.ConfigDict(extra="forbid", strict=True))
class LlamaProcessor(TypedDict, total=False):
    name: Required[Literal["parity", "min_tokens"]]  # parity: the paper's LCP-1; min_tokens: MinTokensLogitsProcessor
    min_tokens: int


@pydantic.with_config(pydantic.ConfigDict(extra="forbid", strict=True))
class LlamaStopping(TypedDict, total=False):
    name: Required[Literal["last_id"]]  # stop when the last id is `token`
    token: Required[int]


@strict
class LlamaConfig:
    """The llama_cpp part of a campaign config (docs/interfaces.md, "Campaign file")."""

    id: str
    model: str = "tiny"
    prompt: str | list[int] = "abcdabcdab"
    # the prompt is a user message, rendered with the model's own chat template (GGUF metadata), as
    # create_chat_completion does; the template's special tokens are parsed as such
    chat: bool = False
    max_new_tokens: Annotated[int, pydantic.Field(ge=1)] = 4
    api: Literal["create_completion", "generate"] = "create_completion"
    drafter: LlamaDrafter = field(default_factory=lambda: {"method": "prompt_lookup", "num_pred_tokens": 3,
                                                           "max_ngram_size": 2})
    sampling: LlamaSampling = field(default_factory=dict)
    processors: list[LlamaProcessor] = field(default_factory=list)
    stopping: list[LlamaStopping] = field(default_factory=list)
    grammar: str | None = None  # GBNF text

    def __post_init__(self) -> None:
        from badc_trace.checkpoints import check_chat

        check_chat(self.chat, self.model, self.prompt)
        for i, p in enumerate(self.processors):
            if p["name"] == "min_tokens" and "min_tokens" not in p:
                raise ValueError(f"key 'processors.{i}.min_tokens' is required by the min_tokens processor")

    def params(self) -> dict[str, float]:
        p = dict(CREATE_COMPLETION_DEFAULTS)
        p.update({k: v for k, v in self.sampling.items() if k in p})
        return p
