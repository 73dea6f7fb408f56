"""Probes for llama-cpp-python (supported: 0.3.19 <= version < 0.4).

What is recorded, per request (`create_completion`, or a `generate()` called on its own):

- `vocab` (once per model in each process, before its first request): each token's bytes as
  `detokenize` gives them, special tokens included, so replay and diff show text beside ids;
- `request`: api, prompt ids, sampling keywords;
- `draft`: each prompt-lookup drafter call, the length of the ids it read and its proposal;
- `sample`: each sample position `idx`, the buffer length `n_tokens` and the sampled token;
- `processor`: each user processor call, with a *copy* of the ids it was given (llama.cpp calls
  processors from a C closure with `self._input_ids`, a view that is later overwritten), the logical
  prefix length `idx + 1`, the role (`step`, or `verify` when unverified drafts are in the buffer), a
  digest of the processor's state, and at level `full` the incoming and outgoing float32 scores;
- `kv_rm`: KV-cache removals (the `n_tokens` rewinds of a rejected draft);
- `stop_check`: each stopping-criteria evaluation, inside `generate()` or in the re-check after the
  loop in `_create_completion`, with the ids it saw;
- `crash`: an exception inside a processor (ctypes swallows it and sampling goes on with unmodified
  logits, so the probe is the only witness) or raised to the caller;
- `return`: the returned ids (the first `usage.completion_tokens` ids generate() yielded), the
  finish reason, usage and logprobs.

Levels: `counts` keeps exercise counters only, `calls` writes the records without scores, `full`
adds scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from badc_trace.binder import Binder
from badc_trace.instrument import BaseInstrumentor, Counter, Request, TraceSink, state_digest
from badc_trace.outcomes import format_outcome


def tracked(state: Any, gen: Any):
    """Yield from a generate() iterator, recording into `state` the ids it yielded, whether it returned
    by itself (a stopping criterion ended it) or was abandoned by the caller, and whether it runs."""
    state.yielded = []
    state.generator_returned = False
    state.in_generate = True
    try:
        for tok in gen:
            state.yielded.append(int(tok))
            yield tok
        state.generator_returned = True
    finally:
        state.in_generate = False
        gen.close()


@dataclass(eq=False)
class _Request(Request):
    api: str = ""  # create_completion or generate
    sample_idx: int = -1
    n_tokens: int = 0
    in_generate: bool = False
    generator_returned: bool = False
    yielded: list[int] = field(default_factory=list)


class LlamaCppInstrumentor(BaseInstrumentor):
    package = "llama-cpp-python"
    engine = "llama_cpp"
    supported = ">=0.3.19,<0.4"
    hook = "llama_cpp.llama"  # badc-trace installs the probe when this module is first imported

    def _instrument(self, sink: TraceSink) -> None:
        import llama_cpp._internals as internals
        import llama_cpp.llama as llama
        import llama_cpp.llama_speculative as speculative

        self._processor_list = llama.LogitsProcessorList
        self._cc_bind = Binder(llama.Llama.create_completion)
        self._gen_bind = Binder(llama.Llama.generate)
        self._wrap(llama.Llama, "create_completion", self._create_completion)
        self._wrap(llama.Llama, "generate", self._generate)
        self._wrap(llama.Llama, "sample", self._sample)
        self._wrap(speculative.LlamaPromptLookupDecoding, "__call__", self._draft)
        self._wrap(internals.LlamaContext, "kv_cache_seq_rm", self._kv_rm)

    # -- request bookkeeping -------------------------------------------------------------------
    def _start(self, api: str, instance: Any, arguments: dict[str, Any]) -> _Request:
        req = self._new_request(_Request, api=api)
        record = None
        if self.sink.recording:  # level counts writes no request record: no tokenizing on the hot path
            prompt = arguments.get("prompt", arguments.get("tokens"))
            if isinstance(prompt, str):
                prompt = instance.tokenize(prompt.encode(), add_bos=False, special=False)
            req.prompt = [int(t) for t in prompt]
            self._vocab(getattr(instance, "model_path", "model"), lambda: _pieces(instance))
            params = {k: v for k, v in arguments.items()
                      if k not in ("self", "prompt", "tokens", "logits_processor", "stopping_criteria", "grammar")
                      and isinstance(v, int | float | str | bool | type(None))}
            record = {"api": api, "prompt": req.prompt, "params": params}
        self._begin(req, record)
        self._wrap_callbacks(arguments, instance)
        return req

    def _wrap_callbacks(self, arguments: dict[str, Any], instance: Any) -> None:
        procs = arguments.get("logits_processor")
        if procs is not None and not getattr(procs, "_badc", False):
            wrapped = self._processor_list([_RecordingProcessor(self, p, i, instance) for i, p in enumerate(procs)])
            wrapped._badc = True
            arguments["logits_processor"] = wrapped
        stops = arguments.get("stopping_criteria")
        if stops is not None and not getattr(stops, "_badc", False):
            arguments["stopping_criteria"] = _RecordingStops(self, stops)

    def _finish(self, req: _Request, tokens: list[int], finish: str, extra: dict[str, Any]) -> None:
        # a processor's exception is swallowed by ctypes, so the completion goes on: still a crash outcome
        outcome = format_outcome([], f"crash:{req.crash}") if req.crash else format_outcome(tokens, finish)
        self._end(req, outcome, {"tokens": tokens, "yielded": req.yielded, "finish_reason": finish, **extra})

    # -- wrappers ------------------------------------------------------------------------------
    def _create_completion(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if self._req is not None:  # nested (e.g. __call__ -> create_completion): outermost only
            return wrapped(*args, **kwargs)
        arguments = self._cc_bind(instance, *args, **kwargs)
        req = self._start("create_completion", instance, arguments)
        stream = arguments.get("stream")
        arguments.pop("self")
        try:
            out = wrapped(**arguments)
        except Exception as e:
            self._end_crashed(req, "caller", e, {"yielded": req.yielded})
            raise
        finally:
            self._local.req = None  # never leave a request open, whatever happened
        if stream:
            self._finish(req, req.yielded, "stream", {})
            return out
        choice, usage = out["choices"][0], out["usage"]
        self._finish(req, req.yielded[:usage["completion_tokens"]], choice["finish_reason"] or "none",
                     {"usage": usage, "logprobs": choice.get("logprobs")})
        return out

    def _generate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if self._req is not None:  # inside create_completion, whose callbacks are wrapped already
            return self._generate_iter(self._req, False, wrapped(*args, **kwargs))
        arguments = self._gen_bind(instance, *args, **kwargs)
        req = self._start("generate", instance, arguments)
        arguments.pop("self")
        return self._generate_iter(req, True, wrapped(**arguments))

    def _generate_iter(self, req: _Request, own: bool, gen: Any):
        try:
            yield from tracked(req, gen)
        finally:
            if own:
                self._finish(req, req.yielded, "returned" if req.generator_returned else "abandoned", {})

    def _sample(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        req = self._req
        idx = kwargs.get("idx")
        if req is None or idx is None:
            return wrapped(*args, **kwargs)
        n_tokens = instance.n_tokens
        req.sample_idx, req.n_tokens = idx, n_tokens  # what the processors' records read
        tok = wrapped(*args, **kwargs)
        if idx + 1 < n_tokens and instance.input_ids[idx + 1] == tok:  # the sample confirms a draft token
            self.sink.count(Counter.ACCEPTED)
        if self.sink.recording:  # no record is built at level counts: this is the engine's hot path
            self.sink.emit_later({"type": "sample", "req": req.id, "idx": int(idx), "n_tokens": int(n_tokens),
                                  "token": int(tok)})
        return tok

    def _draft(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        out = wrapped(*args, **kwargs)
        self.sink.count(Counter.DRAFTER_CALLS)
        self.sink.count(Counter.PROPOSED, len(out))
        if self.sink.recording:
            req = self._req
            ids = args[0] if args else kwargs.get("input_ids")
            self.sink.emit_later({"type": "draft", "req": None if req is None else req.id, "input_len": len(ids),
                                  "draft": [int(t) for t in out]})
        return out

    def _kv_rm(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        out = wrapped(*args, **kwargs)
        req = self._req
        if req is not None:
            self.sink.count(Counter.KV_REMOVALS)
            if self.sink.recording:
                seq, p0, p1 = (list(args) + [None] * 3)[:3]
                self.sink.emit_later({"type": "kv_rm", "req": req.id, "p0": p0, "p1": p1, "ok": bool(out)})
        return out



def _pieces(llm: Any) -> list[bytes]:
    """Each token's bytes as llama.cpp's detokenizer gives them, special tokens included."""
    return [bytes(llm.detokenize([i], special=True)) for i in range(llm.n_vocab())]


class _RecordingProcessor:
    """Pass-through wrapper around one user processor."""

    def __init__(self, probe: LlamaCppInstrumentor, inner: Any, index: int, llm: Any):
        self.probe, self.inner, self.index, self.llm = probe, inner, index, llm
        self.name = getattr(inner, "__name__", type(inner).__name__)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        probe, req = self.probe, self.probe._req
        probe.sink.count(Counter.PROCESSOR_CALLS)
        recording = req is not None and probe.sink.recording
        full = recording and probe.sink.full
        seen = np.asarray(input_ids).tolist() if recording else None  # a copy: the buffer is overwritten later
        before = np.asarray(scores, dtype=np.float32).tobytes() if full else None
        try:
            out = self.inner(input_ids, scores)
        except Exception as e:
            probe._crash(req, f"processor {self.index} ({self.name})", e)
            raise
        if recording:
            rec = {"type": "processor", "req": req.id, "proc": self.index, "name": self.name,
                   "ids": seen, "logical_len": req.sample_idx + 1, "n_tokens": req.n_tokens,
                   "role": "step" if req.n_tokens <= req.sample_idx + 1 else "verify",
                   "state": state_digest(self.inner)}
            if full:
                rec["scores_in"] = before
                rec["scores_out"] = np.asarray(out, dtype=np.float32).tobytes()
            probe.sink.emit_later(rec)
        return out


class _RecordingStops(list):
    """Pass-through wrapper around a StoppingCriteriaList, recording each evaluation."""

    _badc = True

    def __init__(self, probe: LlamaCppInstrumentor, inner: Any):
        super().__init__(inner)
        self.probe, self.inner = probe, inner

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> bool:
        result = bool(self.inner(input_ids, logits))
        probe, req = self.probe, self.probe._req
        probe.sink.count(Counter.STOP_CHECKS)
        if req is not None and probe.sink.recording:
            probe.sink.emit_later({"type": "stop_check", "req": req.id, "ids": [int(t) for t in input_ids],
                                   "where": "generate" if req.in_generate else "postcheck", "result": result,
                                   "sample_idx": req.sample_idx})
        return result
