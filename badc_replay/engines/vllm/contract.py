"""Contract replay of one request's records: D1 and D2 on the step records, D3 on the returned ids and text
(offline)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from badc_replay.calls import LogicalCall
from badc_replay.engines.vllm import grammar
from badc_replay.engines.vllm.config import TEMPERATURE_TOLERANCE
from badc_replay.engines.vllm.masks import banned
from badc_replay.engines.vllm.stops import first_stop, returned_text
from badc_replay.violations import RequestUnchecked, Violation
from badc_trace.engines.vllm import CHILD, ONE_TOKEN


def check_request(records: list[dict[str, Any]], config: Mapping[str, Any],
                  vocab: list[bytes] | None = None) -> list[Violation]:
    """Contract replay of one request's rows (`_check_rows`); a request with n > 1 completions is
    checked completion by completion, its steps told apart by the engine's request id of each.
    `vocab`: the trace's token pieces, which a structured-outputs request's grammar check reads."""
    req = next((r for r in records if r["type"] == "request"), None)
    steps = [i for i, r in enumerate(records) if r["type"] == "step"]
    if not steps and any(r["type"] == "return" and r.get("tokens") for r in records):
        raise RequestUnchecked("it returned tokens, but none of its model-runner steps is in this trace (vLLM's engine "
                               "core ran in another process: replay the run's traces together, e.g. `badc replay "
                               "FOLDER`)")
    if req is None:
        return []
    if int(req["params"].get("n") or 1) == 1:
        if not req["params"].get("structured_outputs"):
            return _check_rows(req, records) + _check_stop_strings(req, records)
        rule, why = _grammar_rule(req, records, vocab)
        found = _check_rows(req, records, rule) + _check_stop_strings(req, records)
        if rule is None:  # the grammar masks tokens before the processors: neither can be checked without it
            raise RequestUnchecked(f"structured outputs: {why}, so grammar state (and the other masks beside it) "
                                   "is not checked by contract replay", found)
        return found
    if req["params"].get("structured_outputs"):
        raise RequestUnchecked("structured outputs of a request with n > 1 are not checked", _check_rows(req, records))
    if req["params"].get("stop"):
        raise RequestUnchecked("stop strings of a request with n > 1 are not checked (its return record holds "
                               "no text per completion)", _check_rows(req, records))
    children: dict[int, list[int]] = {}
    for i in steps:
        child = CHILD.match(str(records[i].get("engine_req", "")))
        if child is None:
            raise RequestUnchecked("a request with n > 1 whose steps do not say which completion they belong to")
        children.setdefault(int(child.group(1)), []).append(i)
    found = []
    for index, rows in sorted(children.items()):
        found += [dataclasses.replace(v, call=rows[v.call], what=f"completion {index}, {v.what}")
                  for v in _check_rows(req, [records[i] for i in rows])]
    return found


Rule = Callable[[list[int]], tuple[set[int], int]]  # logical output -> what the grammar masks after it, among how many


def _grammar_rule(req: dict[str, Any], records: list[dict[str, Any]],
                  vocab: list[bytes] | None) -> tuple[Rule | None, str]:
    """The grammar's masks after each logical output (`grammar.allowed`, the kernel's rule, over the trace's
    token pieces, special ids without text, output text the pieces joined), or None and why not."""
    params = req["params"]
    kinds = params["structured_outputs"]
    pattern = kinds.get("regex") if isinstance(kinds, Mapping) else None
    if pattern is None:
        given = sorted(kinds) if isinstance(kinds, Mapping) else kinds
        return None, f"only a regex grammar is mirrored, this request's is {given}"
    if any(r["type"] == "step" and "grammar_masked" not in r for r in records):
        return None, "the trace holds no grammar masks (a probe older than this one)"
    if not vocab or "special_ids" not in params:
        return None, "the trace holds no vocabulary record, so the tokens' texts are unknown"
    special = set(params["special_ids"])
    pieces = ["" if t in special else bytes(p).decode("utf-8", errors="replace") for t, p in enumerate(vocab)]
    eos = next((t for t in params["stop_token_ids"] if t in special), -1)  # EOS: the special stop id
    everything = set(range(len(pieces)))

    def masked(out: list[int]) -> tuple[set[int], int]:
        text = "".join(pieces[t] for t in out if t < len(pieces))
        if "\ufffd" in text:  # a byte-level piece: the text of ids joined is not the pieces' texts joined
            raise RequestUnchecked("structured outputs: an output holds a token whose text is part of a character, "
                                   "so its text, and the grammar's masks after it, are not rebuilt from the pieces")
        return everything - grammar.allowed(pattern, text, pieces, eos), len(pieces)
    return masked, ""


def _check_rows(req: dict[str, Any], records: list[dict[str, Any]],
                grammar_rule: Rule | None = None) -> list[Violation]:
    """A row's logical position is the committed length plus the drafts before it; a row is used when
    every draft before it was accepted.

    - D2, draft rows: each was divided by the request's temperature (`verify_temperature`, measured
      from the row's entries before and after `apply_sampling_constraints`);
    - D1, every used row: the stop tokens are masked exactly when its logical position is below
      min_tokens, every token outside `allowed_token_ids` always, and a bad word's last token exactly
      when the row's logical output ends with the word's other tokens (the masks seen are the tokens the
      processors set to -inf on that row, among those any of these rules concerns);
    - D1, every used row of a structured-outputs request (`grammar_rule`): the grammar bitmask masks what
      the grammar masks after the row's logical output (grammar state: advanced through the drafts before
      the row, never past them); tokens it masked count as masked for the rules above."""
    params = req["params"]
    m = int(params.get("min_tokens") or 0)
    temperature = float(params.get("temperature") or 0.0)
    max_tokens = int(params.get("max_tokens") or 1 << 30)
    stops = set(params.get("stop_token_ids") or ())
    allowed = frozenset(params["allowed_token_ids"]) if params.get("allowed_token_ids") else None
    vocab = int(params.get("vocab_size") or 0)
    bad = [tuple(w) for w in params.get("bad_words_token_ids") or ()]
    watched = stops | {w[-1] for w in bad} | (set(range(vocab)) - allowed if allowed is not None else set())
    key = "stop tokens masked" if allowed is None and not bad else "tokens masked"
    found: list[Violation] = []
    out: list[int] = []
    for idx, rec in enumerate(records):
        if rec["type"] != "step":
            continue
        c, drafts, produced = rec["committed"], rec["drafts"], rec["produced"]
        accepted = len(produced) - 1 if drafts else 0
        if temperature > 0:
            for j, t in enumerate(rec.get("verify_temperature") or ()):
                if c + j >= max_tokens:  # past max_tokens: the row's token is never returned
                    break
                if t == ONE_TOKEN:  # one allowed token: the row's law does not depend on its temperature
                    continue
                if t is None or abs(t - temperature) > TEMPERATURE_TOLERANCE * temperature:
                    found.append(Violation(req["req"], idx, "D2", f"draft row {j} (rejection_sampler."
                                           "apply_sampling_constraints)", out + list(drafts[:j]),
                                           {"temperature": temperature},
                                           {"temperature": "none (row not finite)" if t is None else t}))
        rows = [(f"draft row {j}", "RejectionSampler.apply_logits_processors", j, rec["verify_masked"][j])
                for j in range(min(len(drafts), accepted + 1))]
        if accepted == len(drafts):
            rows.append((f"{rec['role']} row", "Sampler.apply_logits_processors", len(drafts), rec["final_masked"]))
        for row, where, j, masked in rows:
            pos = c + j
            if pos >= max_tokens:  # past max_tokens: the row's token is never returned
                continue
            logical = out + list(drafts[:j])
            by_grammar: set[int] = set()
            if grammar_rule is not None:
                expected_g, size = grammar_rule(logical)
                by_grammar = {t for t in rec["grammar_masked"][j] if t < size}
                if by_grammar != expected_g:
                    found.append(Violation(
                        req["req"], idx, "D1", f"{row} (apply_grammar_bitmask), output position {pos}", logical,
                        {"tokens masked by the grammar": sorted(expected_g)},
                        {"tokens masked by the grammar": sorted(by_grammar), "committed tokens": c}))
            # a token the grammar masked is masked for the processors' rules too (they never see it finite)
            expected = sorted((banned(logical, stops if pos < m else (), allowed, bad, vocab) | by_grammar) & watched)
            seen = sorted((set(masked) | by_grammar) & watched)
            what = f"{row} ({where}), min_tokens={m}, output position {pos}"
            if seen != expected:
                found.append(Violation(req["req"], idx, "D1", what,
                                       logical, {key: expected}, {key: seen, "committed tokens": c}))
        out.extend(produced)
    return found


def exposure(records: list[dict[str, Any]]) -> dict[str, bool]:
    """Per constraint the request sets, whether it acted on a draft: `min_tokens` on a used row of a step
    with drafts below min_tokens, `allowed_token_ids` or `bad_words` masking a used draft row's own draft,
    `structured_outputs` on any used draft row (the grammar masks every row),
    `stop` (strings) completed by a token the same step produced more tokens after (n = 1 requests)."""
    req = next((r for r in records if r["type"] == "request"), None)
    if req is None or int(req["params"].get("n") or 1) != 1:
        return {}
    params = req["params"]
    m = int(params.get("min_tokens") or 0)
    allowed = frozenset(params["allowed_token_ids"]) if params.get("allowed_token_ids") else None
    bad = [tuple(w) for w in params.get("bad_words_token_ids") or ()]
    vocab = int(params.get("vocab_size") or 0)
    hits = {name: False for name, on in (("min_tokens", m > 0), ("allowed_token_ids", allowed is not None),
                                         ("bad_words", bool(bad)), ("stop", bool(params.get("stop"))),
                                         ("structured_outputs", bool(params.get("structured_outputs")))) if on}
    out: list[int] = []
    step_ends: list[int] = []
    for rec in records:
        if rec["type"] != "step":
            continue
        c, drafts, produced = rec["committed"], rec["drafts"], rec["produced"]
        for j in range(min(len(drafts), len(produced))):  # the used draft rows
            logical = out + list(drafts[:j])
            if "structured_outputs" in hits:  # the grammar's mask at a draft position was used
                hits["structured_outputs"] = True
            if m > 0 and c + j < m:
                hits["min_tokens"] = True
            if allowed is not None and drafts[j] not in allowed:
                hits["allowed_token_ids"] = True
            if bad and drafts[j] in banned(logical, (), None, bad, vocab):
                hits["bad_words"] = True
        if drafts and m > 0 and len(produced) == len(drafts) + 1 and c + len(drafts) < m:
            hits["min_tokens"] = True  # the bonus row
        out.extend(produced)
        step_ends.append(len(out))
    ret = next((r for r in records if r["type"] == "return"), None)
    if "stop" in hits and ret is not None and "text_ends" in ret:
        match = first_stop(_texts(ret, params), params["stop"], m)
        hits["stop"] = match is not None and any(start <= match.token < end - 1 for start, end in
                                                  zip([0, *step_ends], step_ends, strict=False))
    return hits


def _texts(ret: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """The output text after each returned token, as vLLM's detokenizer builds it (from the return record's
    untruncated text and where each token's text ends); a final stop token's own text is left out unless
    `include_stop_str_in_output`."""
    texts = [ret["full_text"][:end] for end in ret["text_ends"]]
    if texts and not params.get("include_stop_str_in_output") and \
            ret["tokens"][-1] in set(params.get("stop_token_ids") or ()):
        texts[-1] = texts[-2] if len(texts) > 1 else ""
    return texts


def _check_stop_strings(req: dict[str, Any], records: list[dict[str, Any]]) -> list[Violation]:
    """D3, the frontend's stop-string check (`stops.first_stop`): the returned ids end at the token that
    completed the first stop string, and the returned text is cut at it (after it with
    `include_stop_str_in_output`). Speculation hands the detokenizer several tokens per step."""
    params = req["params"]
    strings = params.get("stop") or []
    i, ret = next(((i, r) for i, r in enumerate(records) if r["type"] == "return"), (None, None))
    if not strings or ret is None or ret.get("finish_reason") == "crash":
        return []
    if "text_ends" not in ret:
        raise RequestUnchecked("stop strings not checked: the return record holds no text (a trace of an older "
                               "probe, or a streamed request)")
    tokens, include = ret["tokens"], bool(params.get("include_stop_str_in_output"))
    texts = _texts(ret, params)
    match = first_stop(texts, strings, int(params.get("min_tokens") or 0))
    if match is None:
        return []
    found = []
    kept = tokens[:match.token + 1]
    if len(tokens) > len(kept):
        found.append(Violation(req["req"], i, "D3", f"returned ids (the stop string {match.stop!r} was completed "
                               f"by output token {match.token})", kept, {"ids": kept}, {"ids": tokens}))
    text = returned_text(texts[match.token], match, include)
    if ret["text"] != text:
        found.append(Violation(req["req"], i, "D3", f"returned text (stop string {match.stop!r}, "
                               f"include_stop_str_in_output={include})",
                               kept, {"text": text}, {"text": ret["text"]}))
    return found


def _row_seen(rec: dict[str, Any], j: int, masked: list[int]) -> dict[str, list[int]]:
    """What row j of a step record saw: the processors' masks, and the grammar's where recorded."""
    by_grammar = rec.get("grammar_masked")
    return {"masked": sorted(masked), **({"grammar masked": sorted(by_grammar[j])} if by_grammar else {})}


def logical_calls(records: list[dict[str, Any]]) -> list[LogicalCall]:
    """Every used row of the request's steps at its logical prefix (prompt, committed output, the drafts
    before the row), with the tokens its logits processors masked: for `badc diff --by-prefix`."""
    req = next((r for r in records if r["type"] == "request"), None)
    prompt = list(req["prompt"]) if req is not None else []
    calls: list[LogicalCall] = []
    outs: dict[str, list[int]] = {}  # per completion (n > 1): the engine's request id of each
    for idx, rec in enumerate(records):
        if rec["type"] != "step":
            continue
        out = outs.setdefault(str(rec.get("engine_req")), [])
        drafts, produced = list(rec["drafts"]), rec["produced"]
        accepted = len(produced) - 1 if drafts else 0
        for j in range(min(len(drafts), accepted + 1)):
            calls.append(LogicalCall("row", f"draft row {j} (RejectionSampler.apply_logits_processors)",
                                     tuple(prompt + out + drafts[:j]), _row_seen(rec, j, rec["verify_masked"][j]), idx))
        if accepted == len(drafts):
            calls.append(LogicalCall("row", f"{rec['role']} row (Sampler.apply_logits_processors)",
                                     tuple(prompt + out + drafts), _row_seen(rec, len(drafts), rec["final_masked"]),
                                     idx))
        out.extend(produced)
    return calls
