"""Probes for Hugging Face transformers (supported: 5.12 <= version < 6).

What is recorded, per request (the outermost `generate()`; a draft model's `generate()` inside it is
tracked as nesting, its calls carry role `draft`):

- `vocab` (once per model in each process, at levels calls and full): each token's text decoded alone,
  from the tokenizer given to generate() or saved with the model's folder, for text beside ids;
- `request`: prompt ids, the plain generation keywords and, at levels calls and full, `setup`: every
  keyword and the model's generation config as portable bytes (badc_trace/portable.py; models and
  tokenizers by path), written with the first request of a distinct set in each process and named
  by key after that, so that replay can rebuild the processors and stop rules of a program it never saw;
- `draft`: each drafter's `get_candidates` (prompt lookup, draft model), the committed ids it read and
  its proposal; a request's first one also carries the drafter's `settings` as that call found them
  (draft length, schedule, confidence threshold and whether transformers adapts it, which it does only
  where scikit-learn is importable), so a replay can tell whether state carried over between requests;
- `processor`: each processor call, the list (`proc` = -1) and each element (`proc` = its index), with
  the ids it was given, the position's logical prefix length `logical_len`, its role (`filter`: the
  prompt-lookup drafter's candidate filtering on all-one placeholder scores; `verify`: assisted
  decoding's verification; `step`: an ordinary sampling step; `draft`: inside a draft model), a digest
  of the processor's state and, at level `calls`, 16-byte digests of its outgoing scores (`out_digest`)
  and of its incoming ones where they are not the previous element's (`in_digest`), which replay checks
  a re-run of the request against; at level `full`, the incoming and outgoing float32 scores, each vector
  written once: an element whose incoming scores are the previous element's outgoing ones says so
  (`in_previous`), and a list whose scores are its recorded elements' (the first one's incoming, the
  last one's outgoing) gives their number (`scores_elements`) instead (V = 49,152 floats are 196 KB;
  zstd finds a repeat inside one record, not one a few records away);
- `crop`: `Cache.crop` calls (the argument is a 0-d tensor in 5.17, an int later);
- `stop_check`: each stopping-criteria evaluation, the ids, the result, and whether it read the
  committed ids or a candidate (committed ids plus drafts, evaluated before verification in 5.17);
- `crash`: an exception raised out of a processor or `generate()`;
- `return`: the new tokens of the returned sequence, the outcome string and, when the caller asked for
  them, the returned scores and logits (float32 bytes per position).

Levels: `counts` keeps exercise counters only, `calls` writes the records without scores, `full`
adds scores.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from badc_trace import portable
from badc_trace.instrument import BaseInstrumentor, Counter, Request, TraceSink, state_digest
from badc_trace.outcomes import format_outcome

EOS_CODE, LENGTH_CODE, STOP_CODE = "eos", "length", "stop"
PLAIN_TYPES = (int, float, str, bool, type(None))


def outcome_of(new_tokens: list[int], eos_ids: set[int], max_new_tokens: int | None) -> str:
    """transformers returns no termination label; the code is derived from the tokens (EOS last,
    the length budget reached, or else a stopping criterion such as a stop string)."""
    if new_tokens and new_tokens[-1] in eos_ids:
        code = EOS_CODE
    elif max_new_tokens is not None and len(new_tokens) >= max_new_tokens:
        code = LENGTH_CODE
    else:
        code = STOP_CODE
    return format_outcome(new_tokens, code)


def _f32(t: Any) -> bytes:
    t = t.detach().cpu()  # the tensor itself when on the CPU: scores are float32 there, copied once, to bytes
    try:
        a = t.numpy()
    except TypeError:  # bfloat16: no numpy dtype
        a = t.float().numpy()
    return (a if a.dtype == np.float32 else a.astype(np.float32)).reshape(-1).tobytes()


def scores_digest(scores: bytes) -> bytes:
    """What level calls keeps of a float32 score vector (`_f32`'s bytes): 16 bytes instead of 4 per token.
    Replay re-runs the request with its draws scripted and checks it got these vectors bit for bit."""
    return hashlib.blake2b(scores, digest_size=16).digest()


def _plain(v: Any) -> Any:
    # settings may be numpy or torch scalars (an adapted threshold comes from sklearn's roc_curve)
    return v.item() if hasattr(v, "item") else v


def _ids(t: Any) -> list[int]:
    ids = t.reshape(-1).tolist()  # Python ints from an integer tensor (ids are)
    return ids if not ids or type(ids[0]) is int else [int(x) for x in ids]


@dataclass(eq=False)
class _Request(Request):
    depth: int = 0  # generate() nesting: > 1 inside a draft model
    mode: str = "step"  # step | assisted
    in_drafter: str | None = None  # "filter" (prompt lookup) or "draft" (draft model)
    committed: int = 0  # committed length at the last drafter call
    prompt_len: int = 0
    elements: list[Any] = field(default_factory=list)  # the list whose call is in progress
    list_role: str = "step"
    # level full, within the list call in progress: the first recorded element's incoming scores, the
    # last one's outgoing scores and how many were recorded, so that no float32 vector is written twice
    first_in: bytes | None = None
    last_out: bytes | None = None
    recorded: int = 0
    last_out_obj: Any = None  # level calls: the tensor the last recorded element returned (the next one's input)
    in_element: int = 0
    last_draft: tuple[int, list[int]] | None = None  # (committed length, proposal)
    candidate_pending: bool = False  # between a drafter's return and its block's verification
    drafter_seen: bool = False  # the drafter's settings are recorded at its first call

    def account(self, sink: TraceSink, ids: list[int]) -> None:
        """Count the drafts of the last block that were committed: the leading ids after the block's
        committed prefix that equal the proposal (sample-and-match accepts exactly those)."""
        if self.last_draft is None:
            return
        start, draft = self.last_draft
        n = 0
        for d, y in zip(draft, ids[start:], strict=False):
            if d != y:
                break
            n += 1
        sink.count(Counter.ACCEPTED, n)
        self.last_draft = None


def _pieces(path: str, tokenizer: Any) -> list[bytes] | None:
    """Each token's text decoded alone, from the tokenizer the program gave generate(), or the one saved
    beside a model loaded from a folder (badc's tiny models: their vocabulary); None when neither."""
    if path.startswith("tiny:"):
        from badc_trace.tiny.transformers import VOCAB

        return [t.encode() for t in VOCAB]
    if tokenizer is None and os.path.isdir(path):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return None if tokenizer is None else [tokenizer.decode([i]).encode() for i in range(len(tokenizer))]


def _compiled_grammar(grammar_json: str, tokenizer_json: str) -> Any:
    import xgrammar as xgr

    return xgr.CompiledGrammar.deserialize_json(grammar_json, xgr.TokenizerInfo.deserialize_json(tokenizer_json))


def _native_reducers() -> dict[type, Any]:
    """xgrammar's compiled grammars are native objects with their own JSON form."""
    try:
        import xgrammar as xgr
    except ImportError:
        return {}

    def grammar(g: Any) -> tuple[Any, tuple[str, str]]:
        return _compiled_grammar, (g.serialize_json(), g.tokenizer_info.serialize_json())

    return {xgr.CompiledGrammar: grammar}


class TransformersInstrumentor(BaseInstrumentor):
    package = "transformers"
    engine = "transformers"
    supported = ">=5.12,<6"
    hook = "transformers.generation.utils"  # badc-trace installs the probe when this module is first imported
    # what generate()'s recorded arguments may hold (processors, stopping criteria, generation configs,
    # xgrammar's grammars): replay loads nothing else from a trace
    portable_allowlist = portable.Allowlist(class_prefixes=("transformers.generation.", "xgrammar."),
                                            rebuilders=frozenset({(__name__, "_compiled_grammar")}),
                                            reducers=_native_reducers)

    def _instrument(self, sink: TraceSink) -> None:
        from transformers.cache_utils import Cache
        from transformers.generation import candidate_generator as cg
        from transformers.generation import logits_process as lp
        from transformers.generation import stopping_criteria as sc
        from transformers.generation.utils import GenerationMixin
        from transformers.utils import is_sklearn_available

        self._sklearn = is_sklearn_available()
        self._setups: set[str] = set()
        self._element_owners: set[type] = set()
        self._wrap(GenerationMixin, "generate", self._generate)
        self._wrap(GenerationMixin, "_assisted_decoding", self._mode("assisted"))
        self._wrap(GenerationMixin, "_sample", self._mode("step"))
        self._wrap(cg.PromptLookupCandidateGenerator, "get_candidates", self._drafter("filter"))
        self._wrap(cg.AssistedCandidateGenerator, "get_candidates", self._drafter("draft"))
        self._wrap(lp.LogitsProcessorList, "__call__", self._list_call)
        self._wrap(sc.StoppingCriteriaList, "__call__", self._stop_call)
        self._wrap(Cache, "crop", self._crop)
        from transformers import PreTrainedModel, PreTrainedTokenizerBase

        self._wrap(PreTrainedModel, "from_pretrained", self._from_pretrained)
        self._wrap(PreTrainedTokenizerBase, "from_pretrained", self._from_pretrained)

    @staticmethod
    def _from_pretrained(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Remembers, on the loaded model or tokenizer, the keywords that chose its files (a GGUF file in a
        folder, a subfolder, a revision): replay loads it again the same way."""
        loaded = wrapped(*args, **kwargs)
        load = tuple((k, kwargs[k]) for k in portable.LOAD_KEYS if isinstance(kwargs.get(k), str))
        if load:
            with contextlib.suppress(AttributeError, TypeError):
                loaded._badc_load = load
        return loaded

    # -- generate() ------------------------------------------------------------------------------
    def _generate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        req = self._req
        if req is not None:  # a draft model's generate() inside the outer one
            req.depth += 1
            try:
                return wrapped(*args, **kwargs)
            finally:
                req.depth -= 1
        req = self._new_request(_Request, depth=1)
        prompt = kwargs.get("input_ids", args[0] if args else kwargs.get("inputs"))
        req.prompt_len = int(prompt.shape[-1]) if prompt is not None else 0
        rec = None
        if self.sink.recording:
            params = {k: (v if isinstance(v, PLAIN_TYPES) else list(v) if isinstance(v, list | tuple)
                          and all(isinstance(x, PLAIN_TYPES) for x in v) else type(v).__name__)
                      for k, v in kwargs.items() if k not in ("input_ids", "inputs", "attention_mask")}
            rec = {"prompt": [] if prompt is None else _ids(prompt), "params": params,
                   "setup": self._setup(instance, kwargs)}
            path = str(getattr(instance, "name_or_path", "") or "")
            self._vocab(path, lambda: _pieces(path, kwargs.get("tokenizer")))
        self._begin(req, rec)
        try:
            out = wrapped(*args, **kwargs)
        except Exception as e:
            self._end_crashed(req, "generate", e)
            raise
        finally:
            self._local.req = None
        seqs = out if not hasattr(out, "sequences") else out.sequences
        new = _ids(seqs[0, req.prompt_len:])
        req.account(self.sink, _ids(seqs[0]))
        eos = instance.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        extra: dict[str, Any] = {}
        if getattr(out, "scores", None) is not None and self.sink.recording:
            extra["scores"] = [_f32(s[0]) for s in out.scores]
        if getattr(out, "logits", None) is not None and self.sink.recording:
            extra["logits"] = [_f32(s[0]) for s in out.logits]
        max_new = kwargs.get("max_new_tokens", instance.generation_config.max_new_tokens)
        self._end(req, outcome_of(new, eos_ids, max_new), {"tokens": new, **extra})
        return out

    def _setup(self, model: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        """What replay needs to rebuild this request's processors and stop rules in another process:
        the keywords given to generate() (models and tokenizers as references), the model's own
        generation config and what it is loaded from. The bytes go in the trace with the first request
        of each distinct set in this process (`key`); later requests name the key."""
        try:
            args = {k: self._portable(v) for k, v in kwargs.items()
                    if k not in ("input_ids", "inputs", "attention_mask", "streamer")}
            blob = portable.dumps({"model": self._portable(model, own=True), "kwargs": args}, self.portable_allowlist)
        except portable.NotPortable as e:
            return {"unportable": str(e)}
        key = portable.digest(blob)
        if key in self._setups:
            return {"key": key}
        self._setups.add(key)
        return {"key": key, "blob": blob}

    @staticmethod
    def _portable(v: Any, own: bool = False) -> Any:
        """A model or tokenizer as a reference (the generating model's with its generation config; an
        assistant's without: transformers adapts its draft length in place, request after request)."""
        from transformers import PreTrainedModel, PreTrainedTokenizerBase

        if isinstance(v, PreTrainedModel | PreTrainedTokenizerBase):
            path = getattr(v, "name_or_path", "") or ""
            if not path:
                raise portable.NotPortable(f"a {type(v).__name__} with no name_or_path (built in memory) cannot be "
                                           "loaded again")
            if os.path.isdir(path):
                path = os.path.abspath(path)
            load = getattr(v, "_badc_load", ())
            if isinstance(v, PreTrainedTokenizerBase):
                return portable.Ref("tokenizer", path, load=load)
            dtype = str(v.dtype).removeprefix("torch.")
            return portable.Ref("model", path, dtype, v.generation_config if own else None, load=load)
        return v

    def _mode(self, mode: str) -> Any:
        def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            req = self._req
            if req is not None and req.depth == 1:
                req.mode = mode
            return wrapped(*args, **kwargs)

        return wrapper

    # -- drafters --------------------------------------------------------------------------------
    def _drafter(self, role: str) -> Any:
        def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            req = self._req
            ids = args[0] if args else kwargs["input_ids"]
            settings = None
            if req is not None:
                req.in_drafter = role
                req.committed = int(ids.shape[-1])
                if req.depth == 1 and not req.drafter_seen:
                    req.drafter_seen, settings = True, self._settings(instance)
            try:
                cand, cand_logits = wrapped(*args, **kwargs)
            finally:
                if req is not None:
                    req.in_drafter = None
            n = int(cand.shape[-1] - ids.shape[-1])
            if req is not None and req.depth == 1:
                req.account(self.sink, _ids(ids[0]))
                req.last_draft = (int(ids.shape[-1]), _ids(cand[0, ids.shape[-1]:]))
                req.candidate_pending = True
            self.sink.count(Counter.DRAFTER_CALLS)
            self.sink.count(Counter.PROPOSED, n)
            rec = {"type": "draft", "req": None if req is None else req.id, "drafter": type(instance).__name__,
                   "committed": _ids(ids), "draft": _ids(cand[0, ids.shape[-1]:])}
            if settings is not None:
                rec["settings"] = settings
            self.sink.emit(rec)
            return cand, cand_logits

        return wrapper

    def _settings(self, drafter: Any) -> dict[str, Any]:
        """What decides a drafter's proposals besides the ids, read before its first call of a request."""
        if hasattr(drafter, "num_assistant_tokens"):
            gc = drafter.assistant_generation_config
            threshold = gc.assistant_confidence_threshold
            return {"num_assistant_tokens": _plain(drafter.num_assistant_tokens),
                    "schedule": gc.num_assistant_tokens_schedule, "confidence_threshold": _plain(threshold),
                    # utils adapts the threshold inside a request, and only with scikit-learn importable
                    "threshold_adapts": bool(self._sklearn and threshold)}
        return {k: _plain(getattr(drafter, k, None)) for k in ("num_output_tokens", "max_matching_ngram_size")}

    # -- processors ------------------------------------------------------------------------------
    def _role(self, req: _Request) -> str:
        if req.depth > 1:
            return "draft"
        if req.in_drafter == "filter":
            return "filter"
        return "verify" if req.mode == "assisted" else "step"

    def _logical_len(self, req: _Request, role: str, n_ids: int) -> int:
        # verification position i reads committed ids plus drafts d1..di: its logical prefix is all of
        # them, since the position's token is only used when d1..di were accepted; a filter call's
        # placeholder scores belong to no position, so only the committed ids are logical there.
        return req.committed if role in ("filter", "draft") else n_ids

    def _list_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        req = self._req
        if req is None:
            return wrapped(*args, **kwargs)
        for p in instance:
            self._wrap_element(type(p))
        outer = (req.elements, req.list_role, req.first_in, req.last_out, req.recorded, req.last_out_obj)
        ids, scores = args[0], args[1]
        role = self._role(req)
        if role == "verify":
            req.candidate_pending = False
        req.elements, req.list_role = list(instance), role
        req.first_in, req.last_out, req.recorded, req.last_out_obj = None, None, 0, None
        full = self.sink.full
        before = _f32(scores[0]) if full else None
        try:
            out = wrapped(*args, **kwargs)
            first_in, last_out, recorded = req.first_in, req.last_out, req.recorded
        finally:
            req.elements, req.list_role, req.first_in, req.last_out, req.recorded, req.last_out_obj = outer
        self.sink.count(Counter.PROCESSOR_CALLS)
        if not self.sink.recording:
            return out
        n = int(ids.shape[-1])
        rec = {"type": "processor", "req": req.id, "proc": -1, "name": "LogitsProcessorList", "ids": _ids(ids[0]),
               "role": role, "logical_len": self._logical_len(req, role, n), "committed": req.committed}
        if full:
            after = _f32(out[0])
            if recorded and first_in == before and last_out == after:
                rec["scores_elements"] = recorded  # the list's scores are its elements' (first in, last out)
            else:
                rec["scores_in"], rec["scores_out"] = before, after
        self.sink.emit(rec)
        return out

    def _wrap_element(self, cls: type) -> None:
        owner = next((k for k in cls.__mro__ if "__call__" in k.__dict__), None)
        if owner is None or owner in self._element_owners or owner.__module__.startswith("builtins"):
            return
        self._element_owners.add(owner)
        self._wrap(owner, "__call__", self._element_call)

    def _element_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        req = self._req
        if req is None or req.in_element or not any(p is instance for p in req.elements):
            return wrapped(*args, **kwargs)  # not called from a list (or a super().__call__ inside one)
        index = next(i for i, p in enumerate(req.elements) if p is instance)
        ids, scores = args[0], args[1]
        full = self.sink.full
        before = _f32(scores[0]) if full else None
        # level calls: digests of the scores; the incoming ones only where they are not the previous
        # element's outgoing ones (the list hands each element the tensor the one before returned)
        digest_in = scores_digest(_f32(scores[0])) if self.sink.recording and not full and \
            scores is not req.last_out_obj else None
        req.in_element += 1
        try:
            out = wrapped(*args, **kwargs)
        except Exception as e:
            self._crash(req, f"processor {index} ({type(instance).__name__})", e)
            raise
        finally:
            req.in_element -= 1
        if not self.sink.recording:
            return out
        n = int(ids.shape[-1])
        rec = {"type": "processor", "req": req.id, "proc": index, "name": type(instance).__name__,
               "ids": _ids(ids[0]), "role": req.list_role, "logical_len": self._logical_len(req, req.list_role, n),
               "committed": req.committed, "state": state_digest(instance)}
        if full:
            after = _f32(out[0])
            if req.recorded and before == req.last_out:
                rec["in_previous"] = True  # its incoming scores are the previous element's outgoing ones
            else:
                rec["scores_in"] = before
            rec["scores_out"] = after
            req.first_in = before if not req.recorded else req.first_in
            req.last_out, req.recorded = after, req.recorded + 1
        else:
            if digest_in is not None:
                rec["in_digest"] = digest_in
            rec["out_digest"] = scores_digest(_f32(out[0]))
            req.last_out_obj = out
        self.sink.emit(rec)
        return out

    # -- stopping, cache -------------------------------------------------------------------------
    def _stop_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        out = wrapped(*args, **kwargs)
        req = self._req
        if req is not None and req.depth == 1:
            self.sink.count(Counter.STOP_CHECKS)
            # 5.17 also evaluates stopping on the candidate (committed ids + drafts) before verification
            where = "candidate" if req.candidate_pending and req.mode == "assisted" else "committed"
            self.sink.emit({"type": "stop_check", "req": req.id, "ids": _ids(args[0][0]), "where": where,
                            "committed": req.committed, "result": bool(out[0])})
        return out

    def _crop(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        out = wrapped(*args, **kwargs)
        req = self._req
        if req is not None:
            arg = args[0] if args else next(iter(kwargs.values()), None)
            self.sink.count(Counter.KV_REMOVALS)
            self.sink.emit({"type": "crop", "req": req.id, "depth": req.depth, "arg": int(arg),
                            "arg_type": type(arg).__name__})
        return out
