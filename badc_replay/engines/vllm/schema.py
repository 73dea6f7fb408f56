"""The vLLM probe's record types (badc_trace/engines/vllm.py) as typed schemas."""

from badc_replay.schema import BOOL, IDS, INT, MAP, NONE, NUMBER, STR, Const, ListOf, OneOf, Record, extends, optional
from badc_trace.engines.vllm import ONE_TOKEN

# The SamplingParams the checks read (the probe records more; those are left alone).
PARAMS = Record(optional={
    "max_tokens": optional(INT), "min_tokens": optional(INT), "temperature": optional(NUMBER), "n": optional(INT),
    "stop_token_ids": optional(IDS), "stop": optional(ListOf(STR)), "allowed_token_ids": optional(IDS),
    "vocab_size": optional(INT), "bad_words_token_ids": optional(ListOf(IDS)),
    "include_stop_str_in_output": optional(BOOL), "structured_outputs": optional(MAP)})
LOGPROBS = ListOf(optional(NUMBER))

RECORDS = {
    "request": extends("request", {"params": PARAMS}),
    "step": Record({"req": INT, "committed": INT, "drafts": IDS, "verify_masked": ListOf(IDS),
                    # a draft row's temperature: None where the row was not finite, ONE_TOKEN where one token is left
                    "verify_temperature": ListOf(OneOf((NUMBER, NONE, Const(ONE_TOKEN)))),
                    "final_masked": IDS, "role": STR, "produced": IDS},
                   {"grammar_masked": ListOf(IDS), "engine_req": STR}),
    "return": extends("return", optional={
        "finish_reason": optional(STR), "stop_reason": OneOf((INT, STR, NONE)), "logprobs": LOGPROBS,
        "prompt_logprobs": LOGPROBS,
        "completions": ListOf(Record({"index": INT, "tokens": IDS}, {"finish_reason": optional(STR)}))}),
}
