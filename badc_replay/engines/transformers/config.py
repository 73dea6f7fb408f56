"""The transformers part of a campaign config, strict."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Any, Literal, Required

import pydantic
from typing_extensions import TypedDict

from badc_replay.validation import strict

SCORE_TOLERANCE = 1e-4  # float32 scores from block and step evaluation differ by ~1e-6
NEG_INF_FLOOR = -1e30  # scores at or below this are "masked"


@pydantic.with_config(pydantic.ConfigDict(extra="forbid", strict=True))
class TransformersDrafter(TypedDict, total=False):
    """Prompt lookup (`prompt_lookup_num_tokens`, `max_matching_ngram_size`) or a draft model (its
    `GenerationConfig`'s `num_assistant_tokens`, schedule and confidence threshold)."""

    method: Required[Literal["prompt_lookup", "draft_model"]]
    num_tokens: Annotated[int, pydantic.Field(ge=1)]  # prompt lookup
    max_ngram_size: Annotated[int, pydantic.Field(ge=1)]  # prompt lookup
    model: str  # draft model: "tiny:SEED" or a folder
    num_assistant_tokens: int
    # "heuristic" carries the draft length over from one generate() call to the next, so a draw then
    # depends on the draws before it
    schedule: Literal["constant", "heuristic", "heuristic_transient"]
    confidence_threshold: Annotated[float, pydantic.Field(ge=0, le=1)]  # 0: no confidence criterion


@pydantic.with_config(pydantic.ConfigDict(extra="forbid", strict=True))
class XgrammarProcessor(TypedDict):
    name: Literal["xgrammar"]
    grammar: str  # EBNF text, compiled by xgrammar


@strict
class TransformersConfig:
    """The transformers part of a campaign config (docs/interfaces.md, "Campaign file"). `generation` holds
    engine-native `generate()` keywords (checked against the installed GenerationConfig's,
    `check_native`); `drafter` is prompt lookup or a draft model."""

    id: str
    model: str = "tiny"
    prompt: str | list[int] = "abcdabcdab"
    chat: bool = False  # the prompt is a user message, through the tokenizer's chat template
    max_new_tokens: Annotated[int, pydantic.Field(ge=1)] = 3
    drafter: TransformersDrafter = field(default_factory=lambda: {"method": "prompt_lookup", "num_tokens": 3,
                                                                  "max_ngram_size": 2})
    generation: dict[str, Any] = field(default_factory=dict)
    processors: list[XgrammarProcessor] = field(default_factory=list)  # third-party logits processors

    def __post_init__(self) -> None:
        from badc_trace.checkpoints import check_chat

        check_chat(self.chat, self.model, self.prompt)
        reserved = {"max_new_tokens", "do_sample", "prompt_lookup_num_tokens", "assistant_model", "logits_processor"}
        if reserved & set(self.generation):
            raise ValueError(f"generation keywords {sorted(reserved & set(self.generation))} are set by badc "
                             "(use max_new_tokens and drafter)")


def _version() -> tuple[int, ...]:
    import importlib.metadata

    return tuple(int(x) for x in importlib.metadata.version("transformers").split(".")[:2])
