"""The llama-cpp-python probe's record types (badc_trace/engines/llama_cpp.py) as typed schemas."""

from badc_replay.schema import BOOL, BYTES, IDS, INT, MAP, NUMBER, REQ, STR, ListOf, Record, extends, optional

RECORDS = {
    "request": extends("request", {"api": STR, "params": MAP}),
    "return": extends("return", optional={
        "yielded": IDS, "finish_reason": optional(STR), "usage": optional(MAP),
        "logprobs": optional(Record({"token_logprobs": ListOf(optional(NUMBER))}))}),
    "sample": Record({"req": INT, "idx": INT, "n_tokens": INT, "token": INT}),
    "draft": Record({"req": REQ, "input_len": INT, "draft": IDS}),
    "kv_rm": Record({"req": INT, "p0": INT, "p1": INT, "ok": BOOL}),
    # a call no request claims (req null) is counted and leaves the trace unchecked
    "processor": Record({"req": REQ, "proc": INT, "name": STR, "ids": IDS, "logical_len": INT, "n_tokens": INT,
                         "role": STR}, {"state": STR, "scores_in": BYTES, "scores_out": BYTES}),
    "stop_check": Record({"req": INT, "ids": IDS, "where": STR, "result": BOOL, "sample_idx": INT}),
}
