"""The transformers probe's record types (badc_trace/engines/transformers.py) as typed schemas."""

from badc_replay.schema import BOOL, BYTES, IDS, INT, MAP, REQ, STR, ListOf, Record, extends

RECORDS = {
    "request": extends("request", {"params": MAP},
                       {"setup": Record(optional={"key": STR, "blob": BYTES, "unportable": STR})}),
    "return": extends("return", optional={"scores": ListOf(BYTES), "logits": ListOf(BYTES)}),
    "draft": Record({"req": REQ, "drafter": STR, "committed": IDS, "draft": IDS}, {"settings": MAP}),
    "processor": Record({"req": INT, "proc": INT, "name": STR, "ids": IDS, "role": STR, "logical_len": INT,
                         "committed": INT}, {"state": STR, "scores_in": BYTES, "scores_out": BYTES,
                                             # level calls: digests of the scores (rerun.py)
                                             "in_digest": BYTES, "out_digest": BYTES,
                                             # scores written once (written_once.py)
                                             "in_previous": BOOL, "scores_elements": INT}),
    "stop_check": Record({"req": INT, "ids": IDS, "where": STR, "committed": INT, "result": BOOL}),
    "crop": Record({"req": INT, "depth": INT, "arg": INT, "arg_type": STR}),
}
