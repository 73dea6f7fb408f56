"""Hugging Face transformers: harness, kernel adapter, executable hypotheses, contract replay, collection.

The kernel adapter (A1-A4) is the engine itself: `generate()` with speculation off, on the same
prompt, horizon, EOS, stop strings and generation keywords, with `torch.multinomial` scripted, so that
every run builds fresh processors and stopping criteria with the engine's own factories
(`_get_logits_processor`, `_get_stopping_criteria`) and replays stateful processors along the prefix
it decodes. Enumerating the scripts gives the exact law P of returned outputs.

The executable hypotheses are a separate simulator of assisted decoding with prompt lookup
(`AssistedSimulator`): the drafter's candidate filtering on all-one placeholder scores, verification
calls at h, h.d1, h.d1.d2, ... computed before sampling, sample-and-match acceptance, the length budget,
and stopping evaluated on the committed ids after each block. Its switches: processors `persistent`
(one list for the request, never rolled back: H-D2-cfg, H-D2-synthid, H-D2-xgr) or `fresh` (replayed
from the factory along each position's prefix), and stopping at `block` ends (H-D3-stopstring) or at
every committed token (`sequential`). With `fresh` and `sequential` it must reproduce P
(`simulator_check`).

Nothing here imports torch or transformers at module level: the main environment imports this module
for predicates.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from badc_replay.arms import ArmResult
from badc_replay.enumeration import Branch, Choose, ExactLaw, enumerate_law
from badc_trace.outcomes import format_outcome, parse_outcome

SCORE_TOLERANCE = 1e-4  # float32 scores from block and step evaluation differ by ~1e-6
NEG_INF_FLOOR = -1e30  # scores at or below this are "masked"
# num_assistant_tokens_schedule values (GenerationConfig): "heuristic" carries the draft length over
# from one generate() call to the next, so a draw then depends on the draws before it
DRAFT_SCHEDULES = ("constant", "heuristic", "heuristic_transient")


@dataclass
class TransformersConfig:
    """The transformers part of a campaign config (DESIGN.md, "Campaign file"). `generation` holds
    engine-native `generate()` keywords; `drafter` is prompt lookup or a draft model."""

    id: str
    model: str = "tiny"
    prompt: str | list[int] = "abcdabcdab"
    max_new_tokens: int = 3
    drafter: dict[str, Any] = field(default_factory=lambda: {"method": "prompt_lookup", "num_tokens": 3,
                                                             "max_ngram_size": 2})
    generation: dict[str, Any] = field(default_factory=dict)
    processors: list[dict[str, Any]] = field(default_factory=list)  # third-party: {"name": "xgrammar", ...}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TransformersConfig:
        cfg = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
        method = cfg.drafter.get("method")
        if method not in ("prompt_lookup", "draft_model"):
            raise ValueError(f"config {cfg.id}: transformers drafter.method must be prompt_lookup or draft_model, "
                             f"not {method!r}")
        schedule = cfg.drafter.get("schedule", "constant")
        if method == "draft_model" and schedule not in DRAFT_SCHEDULES:
            raise ValueError(f"config {cfg.id}: transformers drafter.schedule must be one of "
                             f"{', '.join(DRAFT_SCHEDULES)}, not {schedule!r}")
        threshold = cfg.drafter.get("confidence_threshold", 0)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise ValueError(f"config {cfg.id}: transformers drafter.confidence_threshold must be a number in [0, 1] "
                             f"(0: no confidence criterion), not {threshold!r}")
        for p in cfg.processors:
            if p.get("name") != "xgrammar":
                raise ValueError(f"config {cfg.id}: unknown transformers processor {p.get('name')!r} (known: xgrammar)")
        reserved = {"max_new_tokens", "do_sample", "prompt_lookup_num_tokens", "assistant_model", "logits_processor"}
        if reserved & set(cfg.generation):
            raise ValueError(f"config {cfg.id}: generation keywords {sorted(reserved & set(cfg.generation))} are set "
                             "by badc (use max_new_tokens and drafter)")
        return cfg


def config_from_dict(d: Mapping[str, Any]) -> TransformersConfig:
    return TransformersConfig.from_dict(d)


def engine_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("transformers")


def _version() -> tuple[int, ...]:
    return tuple(int(x) for x in engine_version().split(".")[:2])


# ---------------------------------------------------------------------------------------------
# Harness: one configuration on one model
# ---------------------------------------------------------------------------------------------


def load_model(spec: str) -> tuple[Any, Any]:
    from badc_trace.tiny import parse_model_spec
    from badc_trace.tiny import transformers as tiny

    seed = parse_model_spec("transformers", spec)
    if seed is not None:
        return tiny.build(seed)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(spec).eval(), AutoTokenizer.from_pretrained(spec)


def _generation_kwargs(cfg: TransformersConfig, tokenizer: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {"do_sample": True, "max_new_tokens": cfg.max_new_tokens}
    for k, v in cfg.generation.items():
        if k == "watermarking_config" and isinstance(v, Mapping) and v.get("type") == "synthid":
            from transformers import SynthIDTextWatermarkingConfig

            v = SynthIDTextWatermarkingConfig(**{a: b for a, b in v.items() if a != "type"})
        elif k == "sequence_bias":
            v = {tuple(int(t) for t in ids): float(b) for ids, b in v}
        kw[k] = v
    if kw.get("stop_strings"):
        kw["tokenizer"] = tokenizer
    return kw


def _compile_grammars(cfg: TransformersConfig, tokenizer: Any, model: Any) -> list[Any]:
    compiled = []
    for p in cfg.processors:
        import xgrammar as xgr

        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
        compiled.append(xgr.GrammarCompiler(info).compile_grammar(p["grammar"]))
    return compiled


class Harness:
    """Runs one configuration: `draw(seed)` -> outcome string."""

    def __init__(self, cfg: TransformersConfig, speculative: bool):
        import torch

        self.cfg, self.speculative = cfg, speculative
        if str(cfg.model).startswith("tiny"):
            torch.set_num_threads(1)  # tiny models: threads only contend with the other workers
        self.model, self.tok = load_model(cfg.model)
        prompt = cfg.prompt if isinstance(cfg.prompt, list) else self.tok(cfg.prompt).input_ids
        self.prompt = [int(t) for t in prompt]
        self.input_ids = torch.tensor([self.prompt])
        self.kwargs = _generation_kwargs(cfg, self.tok)
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos])
        self.grammars = _compile_grammars(cfg, self.tok, self.model)
        self.spec_kwargs: dict[str, Any] = {}
        if speculative:
            d = cfg.drafter
            if d["method"] == "prompt_lookup":
                self.spec_kwargs = {"prompt_lookup_num_tokens": int(d.get("num_tokens", 3)),
                                    "max_matching_ngram_size": int(d.get("max_ngram_size", 2))}
            else:
                assistant, _ = load_model(d.get("model", "tiny:11"))
                self.spec_kwargs = {"assistant_model": assistant}
                gc = assistant.generation_config
                if "num_assistant_tokens" in d:
                    gc.num_assistant_tokens = int(d["num_assistant_tokens"])
                    gc.num_assistant_tokens_schedule = "constant"
                gc.num_assistant_tokens_schedule = d.get("schedule", gc.num_assistant_tokens_schedule)
                if "confidence_threshold" in d:
                    gc.assistant_confidence_threshold = float(d["confidence_threshold"])

    def call_kwargs(self) -> dict[str, Any]:
        """generate() keywords for one request; third-party processors are made fresh for each
        (xgrammar's keeps matcher state), from grammars compiled once."""
        kw = {**self.kwargs, **self.spec_kwargs}
        if self.grammars:
            from transformers import LogitsProcessorList
            from xgrammar.contrib.hf import LogitsProcessor as XgrProcessor

            kw["logits_processor"] = LogitsProcessorList([XgrProcessor(g) for g in self.grammars])
        return kw

    def outcome(self, out: Any) -> str:
        from badc_trace.engines.transformers import outcome_of

        seqs = out.sequences if hasattr(out, "sequences") else out
        return outcome_of([int(t) for t in seqs[0, len(self.prompt):].tolist()], self.eos, self.cfg.max_new_tokens)

    def draw(self, seed: int) -> str:
        import torch

        torch.random.default_generator.manual_seed(seed)  # ~100x faster than torch.manual_seed
        try:
            with torch.no_grad():
                out = self.model.generate(self.input_ids, **self.call_kwargs())
        except Exception as e:  # raised to the caller: a crash outcome
            return format_outcome([], f"crash:{type(e).__name__}")
        return self.outcome(out)


# ---------------------------------------------------------------------------------------------
# Kernel: the engine's factories, logits, exact laws
# ---------------------------------------------------------------------------------------------


class _Captured(Exception):
    def __init__(self, processors: Any, stopping: Any):
        self.processors, self.stopping = processors, stopping


class Kernel:
    """The sequential kernel of one configuration: model logits at a prefix, fresh processors and
    stopping criteria from the engine's factories, the processed distribution at a logical prefix
    (stateful processors replayed along it), and the exact law P."""

    def __init__(self, cfg: TransformersConfig):
        self.cfg = cfg
        self.h = Harness(cfg, speculative=False)
        self.model, self.prompt = self.h.model, self.h.prompt
        self._logits: dict[tuple[int, ...], Any] = {}
        self._replayed: dict[tuple[int, tuple[int, ...]], Any] = {}
        self._expected: dict[tuple[int, tuple[int, ...], bytes], np.ndarray] = {}
        self._stops: dict[tuple[int, ...], bool] = {}

    def fresh(self) -> tuple[Any, Any]:
        """(LogitsProcessorList, StoppingCriteriaList) exactly as generate() prepares them for this
        configuration, captured before decoding starts."""
        model = self.model
        get_procs, get_stops = model._get_logits_processor, model._get_stopping_criteria
        box: dict[str, Any] = {}

        def procs(*a: Any, **k: Any) -> Any:
            box["p"] = get_procs(*a, **k)
            return box["p"]

        def stops(*a: Any, **k: Any) -> Any:
            raise _Captured(box["p"], get_stops(*a, **k))

        model._get_logits_processor, model._get_stopping_criteria = procs, stops
        try:
            model.generate(self.h.input_ids, **self.h.call_kwargs())
        except _Captured as c:
            return c.processors, c.stopping
        finally:
            del model._get_logits_processor, model._get_stopping_criteria
        raise RuntimeError(f"config {self.cfg.id}: generate() did not build its processors")

    def logits(self, ids: list[int] | tuple[int, ...]) -> Any:
        import torch

        key = tuple(ids)
        if key not in self._logits:
            with torch.no_grad():
                self._logits[key] = self.model(torch.tensor([key])).logits[0, -1].float()
        return self._logits[key].clone()

    def replayed(self, index: int, ids: list[int] | tuple[int, ...]) -> Any:
        """A fresh element `index` of the processor list (-1: the whole list), called along the
        prefixes prompt .. ids[:-1] as sequential decoding would (placeholder zero scores: the
        registered stateful processors' state ignores scores), ready for its call at `ids`."""
        import torch

        key = (index, tuple(ids))
        hit = self._replayed.get(key)
        if hit is not None:
            try:
                return copy.deepcopy(hit, {id(self.model): self.model})
            except Exception:  # a processor holding native state: replay it again
                pass
        procs, _ = self.fresh()
        proc = procs if index < 0 else procs[index]
        zeros = torch.zeros((1, self.model.config.vocab_size))
        with torch.no_grad():  # a processor's tensors must be graph leaves to be copied
            for t in range(len(self.prompt), len(ids)):
                proc(torch.tensor([list(ids[:t])]), zeros.clone())
        try:
            self._replayed[key] = copy.deepcopy(proc, {id(self.model): self.model})
        except Exception:
            pass
        return proc

    def processed(self, ids: list[int] | tuple[int, ...], scores: Any = None) -> Any:
        """The processed scores at logical prefix `ids`: the whole list, fresh and replayed, applied to
        `scores` (default: the model logits at `ids`)."""
        import torch

        s = self.logits(ids) if scores is None else scores
        proc = self.replayed(-1, ids)
        with torch.no_grad():
            return proc(torch.tensor([list(ids)]), s.reshape(1, -1).clone())[0]

    def expected_element(self, index: int, ids: list[int], scores_in: bytes) -> np.ndarray:
        """D2's expected output of element `index` at `ids` on the recorded incoming scores (cached:
        the same prefix and incoming scores recur across draws)."""
        import torch

        key = (index, tuple(ids), scores_in)
        hit = self._expected.get(key)
        if hit is None:
            proc = self.replayed(index, ids)
            incoming = torch.from_numpy(np.frombuffer(scores_in, dtype=np.float32).copy()).reshape(1, -1)
            with torch.no_grad():
                hit = self._expected[key] = proc(torch.tensor([list(ids)]), incoming)[0].float().numpy()
        return hit

    def stop_map(self, ids: list[int] | tuple[int, ...]) -> bool:
        """Whether fresh stopping criteria stop at `ids` (cached: they are a function of the ids)."""
        import torch

        key = tuple(ids)
        if key not in self._stops:
            _, stops = self.fresh()
            with torch.no_grad():
                self._stops[key] = bool(stops(torch.tensor([list(ids)]), None)[0])
        return self._stops[key]

    def exact_law(self) -> ExactLaw:
        """P: the speculation-off engine with `torch.multinomial` scripted."""
        import torch

        original = torch.multinomial
        h = self.h

        def run(choose: Choose) -> str:
            def multinomial(probs: Any, num_samples: int = 1, *a: Any, **k: Any) -> Any:
                row = probs.reshape(-1, probs.shape[-1])[0].double().numpy()
                return torch.tensor([[choose(row / row.sum())]])

            torch.multinomial = multinomial
            try:
                with torch.no_grad():
                    out = h.model.generate(h.input_ids, **h.call_kwargs())
            except Branch:
                raise
            except Exception as e:
                return format_outcome([], f"crash:{type(e).__name__}")
            finally:
                torch.multinomial = original
            return h.outcome(out)

        return enumerate_law(run, what=f"config {self.cfg.id}")


# ---------------------------------------------------------------------------------------------
# Executable hypotheses: a simulator of assisted decoding with prompt lookup
# ---------------------------------------------------------------------------------------------


def _masked(x: float) -> bool:
    return not np.isfinite(x) or x <= NEG_INF_FLOOR


class AssistedSimulator:
    """Assisted decoding's call schedule with prompt lookup (generation/utils.py `_assisted_decoding`,
    candidate_generator.py `PromptLookupCandidateGenerator.get_candidates`), on the kernel's logits
    and the engine's processor and stopping factories."""

    def __init__(self, kernel: Kernel, processors: str = "persistent", stopping: str = "block"):
        if processors not in ("persistent", "fresh") or stopping not in ("block", "sequential"):
            raise ValueError("processors: persistent|fresh; stopping: block|sequential")
        if kernel.cfg.drafter.get("method") != "prompt_lookup":
            raise ValueError(f"config {kernel.cfg.id}: the simulator models prompt lookup only; the draft-model path "
                             "is outside Lemma 1 (its hypothesis law only defines events)")
        self.k, self.processors, self.stopping = kernel, processors, stopping
        d = kernel.cfg.drafter
        self.num_tokens, self.ngram = int(d.get("num_tokens", 3)), int(d.get("max_ngram_size", 2))
        self.max_length = len(kernel.prompt) + kernel.cfg.max_new_tokens
        self.eos = kernel.h.eos
        # 5.17 (and earlier) also evaluates stopping on the candidate and drops the bonus token when the
        # candidate is done and fully accepted; later releases crop at EOS instead.
        self.done_candidate_rule = _version() < (5, 18)

    def _lookup(self, ids: list[int], filt: Callable[[list[int], Any], Any]) -> list[int]:
        import torch

        n_in = len(ids)
        if self.max_length == n_in + 1:
            return []
        for n in range(min(self.ngram, n_in - 1), 0, -1):
            gram = ids[-n:]
            for idx in range(n_in - n + 1):
                if ids[idx: idx + n] != gram:
                    continue
                start = idx + n
                end = min(start + self.num_tokens, n_in, self.max_length)
                if start >= end:
                    continue
                chosen = ids[start:end]
                seq = ids
                # One placeholder tensor per match, as in get_candidates: a processor that masks in
                # place (xgrammar) carries its mask into the next filtering call.
                placeholder = torch.ones((1, self.k.model.config.vocab_size))
                for ci, tok in enumerate(list(chosen)):
                    if _masked(float(filt(seq, placeholder)[tok])):
                        chosen = chosen[:ci]
                        break
                    seq = ids + chosen[: ci + 1]
                if not chosen:
                    continue
                cut = next((i for i, t in enumerate(chosen) if t in self.eos), None)
                return chosen if cut is None else chosen[:cut]
        return []

    def run(self, choose: Choose) -> str:
        import torch

        from badc_trace.engines.transformers import outcome_of

        k = self.k
        ids = list(k.prompt)
        procs, stops = k.fresh()
        persistent = self.processors == "persistent"

        def filt(seq: list[int], placeholder: Any) -> Any:
            if persistent:
                return procs(torch.tensor([seq]), placeholder)[0]
            return k.processed(seq, placeholder[0])

        def stop(seq: list[int]) -> bool:
            return bool(stops(torch.tensor([seq]), None)[0])

        with torch.no_grad():
            while True:
                cand = self._lookup(ids, filt)
                done_candidate = self.done_candidate_rule and stop(ids + cand)
                rows = []
                for i in range(len(cand) + 1):  # every row is processed before any is sampled
                    prefix = ids + cand[:i]
                    s = (procs(torch.tensor([prefix]), k.logits(prefix).reshape(1, -1))[0] if persistent
                         else k.processed(prefix))
                    row = torch.softmax(s.float(), -1).double().numpy()
                    rows.append(row / row.sum())
                block: list[int] = []
                for i, row in enumerate(rows):
                    y = choose(row)
                    block.append(y)
                    if i == len(cand) or y != cand[i]:
                        break
                if done_candidate and len(block) == len(cand) + 1:
                    block = block[:-1]
                block = block[: self.max_length - len(ids)]
                if self.stopping == "sequential":
                    for j in range(len(block)):
                        if stop(ids + block[: j + 1]):
                            block = block[: j + 1]
                            break
                ids = ids + block
                if stop(ids):
                    return outcome_of(ids[len(k.prompt):], self.eos, k.cfg.max_new_tokens)

    def run_or_crash(self, choose: Choose) -> str:
        try:
            return self.run(choose)
        except Branch:
            raise
        except Exception as e:  # e.g. xgrammar's matcher asserting on a token it was fed twice
            return format_outcome([], f"crash:{type(e).__name__}")

    def exact_law(self) -> ExactLaw:
        return enumerate_law(self.run_or_crash, what=f"config {self.k.cfg.id} (simulator)")


HYPOTHESES = {
    # Stateful processors advanced by candidate filtering and by every verification row, never rolled back.
    "H-D2-cfg": {"processors": "persistent", "stopping": "block"},
    "H-D2-synthid": {"processors": "persistent", "stopping": "block"},
    "H-D2-xgr": {"processors": "persistent", "stopping": "block"},
    # Stopping evaluated on the committed ids only at the end of each verification block.
    "H-D3-stopstring": {"processors": "fresh", "stopping": "block"},
}


def reference_law(cfg: TransformersConfig) -> ExactLaw:
    return Kernel(cfg).exact_law()


def hypothesis_law(cfg: TransformersConfig, hypothesis: str) -> ExactLaw:
    if hypothesis not in HYPOTHESES:
        raise ValueError(f"config {cfg.id}: unknown transformers hypothesis {hypothesis!r}; "
                         f"known: {', '.join(HYPOTHESES)}")
    return AssistedSimulator(Kernel(cfg), **HYPOTHESES[hypothesis]).exact_law()


def simulator_check(cfg: TransformersConfig) -> float:
    """With fresh processors at every position and sequential stopping, the simulator must reproduce P:
    the largest absolute difference (float32 block-versus-step logits: ~1e-7)."""
    kernel = Kernel(cfg)
    p = kernel.exact_law().law
    q = AssistedSimulator(kernel, "fresh", "sequential").exact_law().law
    return max(abs(p.get(y, 0.0) - q.get(y, 0.0)) for y in set(p) | set(q))


# ---------------------------------------------------------------------------------------------
# Predicates (pure functions of outcome strings; the tiny model's vocabulary decodes them)
# ---------------------------------------------------------------------------------------------


def _text(tokens: tuple[int, ...] | list[int]) -> str:
    from badc_trace.tiny.transformers import VOCAB

    return "".join(VOCAB[t] if 0 <= t < len(VOCAB) else "?" for t in tokens)


def predicate(name: str, cfg: TransformersConfig) -> Callable[[str], bool]:
    """Registered witness predicates: True when an outcome violates.

    - `max_new_tokens`: more than max_new_tokens new tokens returned;
    - `stop_strings`: a stop string completed before the last returned token (generation went on
      past a stop the sequential engine would have honoured).
    """
    if name == "max_new_tokens":
        return lambda y: len(parse_outcome(y).tokens) > cfg.max_new_tokens
    if name == "stop_strings":
        if not str(cfg.model).startswith("tiny"):
            raise ValueError(f"config {cfg.id}: predicate stop_strings decodes with the tiny model's vocabulary")
        stops = list(cfg.generation.get("stop_strings") or [])
        prompt = _text(cfg.prompt) if isinstance(cfg.prompt, list) else cfg.prompt

        def past_stop(y: str) -> bool:
            toks = parse_outcome(y).tokens
            for j in range(1, len(toks)):  # a stop completed by new token j, with tokens after it
                text = prompt + _text(toks[:j])
                if any(text.endswith(s) for s in stops):
                    return True
            return False

        return past_stop
    raise ValueError(f"config {cfg.id}: unknown predicate {name!r} (known: max_new_tokens, stop_strings)")


# ---------------------------------------------------------------------------------------------
# Contract replay of one request's records: D1 without the engine; D2, D3 with the kernel
# ---------------------------------------------------------------------------------------------


def replay_context(header: Mapping[str, Any]) -> tuple[Kernel | None, str | None]:
    """The kernel for D2/D3 when the trace's build is the one installed here; else why not."""
    try:
        version = engine_version()
    except Exception:
        return None, "D2 and D3 not checked: transformers is not installed here (replay under the build's interpreter)"
    if header.get("build") != version:
        return None, f"D2 and D3 not checked: the trace is from transformers {header.get('build')}, {version} is here"
    try:
        return Kernel(config_from_dict(header.get("config", {}))), None
    except (TypeError, ValueError, KeyError) as e:
        return None, f"D2 and D3 not checked: the trace header's config is not a transformers config ({e})"


def _floats(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.float32)


def _score_diff(expected: np.ndarray, seen: np.ndarray) -> float:
    """Largest difference, with masked scores compared as masked."""
    me, ms = expected <= NEG_INF_FLOOR, seen <= NEG_INF_FLOOR
    if (me != ms).any():
        return float("inf")
    keep = ~me
    return float(np.max(np.abs(expected[keep].astype(np.float64) - seen[keep]))) if keep.any() else 0.0


def check_request(records: list[dict[str, Any]], config: Mapping[str, Any], context: Kernel | None = None) -> list[Any]:
    """D1: each position's processor call sees its logical prefix (committed ids, plus drafts d1..di at
    verification row i). D2 (kernel): each element's output equals a fresh element replayed along
    that prefix and applied to the same incoming scores. D3 (kernel): stopping evaluated on committed
    ids agrees with the sequential stop map, and no committed token lies past a sequential stop."""

    from badc_replay.contract import Violation

    out: list[Violation] = []
    req = next((r for r in records if r["type"] == "request"), None)
    ret = next((r for r in records if r["type"] == "return"), None)
    if req is None:
        return out
    prompt = req["prompt"]
    draft: dict[str, Any] | None = None
    stop_map = context.stop_map if context is not None else None
    checked_to = len(prompt)
    for i, rec in enumerate(records):
        kind = rec["type"]
        if kind == "draft":
            draft = rec
        elif kind == "processor" and rec["role"] in ("verify", "step"):
            ids = rec["ids"]
            if rec["role"] == "verify" and draft is not None:
                committed = draft["committed"]
                expected = committed + draft["draft"][: max(len(ids) - len(committed), 0)]
            else:
                expected = prompt + (ret["tokens"] if ret else [])[: max(len(ids) - len(prompt), 0)]
            if rec["proc"] == -1 and ids != expected:
                out.append(Violation(rec["req"], i, "D1", f"processor list, {rec['role']} call", expected,
                                     f"{len(expected)} ids (the position's logical prefix)", f"ids {ids}"))
            if context is not None and rec["proc"] >= 0 and "scores_in" in rec:
                want = context.expected_element(rec["proc"], ids, rec["scores_in"])
                seen = _floats(rec["scores_out"])
                diff = _score_diff(want, seen)
                if diff > SCORE_TOLERANCE:
                    out.append(Violation(rec["req"], i, "D2", f"processor {rec['proc']} ({rec['name']}), {rec['role']} "
                                         f"call at position {len(ids) - len(prompt)}", ids,
                                         f"scores of a fresh {rec['name']} replayed along the prefix: "
                                         f"{np.round(want, 4).tolist()}",
                                         f"{np.round(seen, 4).tolist()} (max difference {diff:.3g}; state "
                                         f"{rec.get('state')})"))
        elif kind == "stop_check" and stop_map is not None and rec.get("where", "committed") == "committed":
            ids = rec["ids"]
            for t in range(checked_to + 1, len(ids)):
                if stop_map(ids[:t]):
                    out.append(Violation(rec["req"], i, "D3", "stopping after a verification block", ids[:t],
                                         f"stop after {t - len(prompt)} new tokens (sequential stop map)",
                                         f"first evaluated at {len(ids) - len(prompt)} new tokens {ids[len(prompt):]}, "
                                         f"result {rec['result']}"))
                    break
            if stop_map(ids) != rec["result"]:
                out.append(Violation(rec["req"], i, "D3", "stopping on committed ids", ids,
                                     f"stop map {stop_map(ids)}", f"result {rec['result']}"))
            checked_to = max(checked_to, len(ids))
    return out


def check_records(trace_path: str, kernel: Kernel) -> dict[str, Any]:
    """D4: returned `scores[j]` against the processed scores at the token's logical prefix (fresh
    processors replayed along it) and `logits[j]` against the raw model logits there."""
    from badc_trace.format import read_trace

    draws = mismatch = 0
    positions: dict[int, int] = {}
    first = None
    prompt: list[int] = []
    expected_cache: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}
    for rec in read_trace(trace_path, allow_torn_tail=True):
        if rec["type"] == "request":
            prompt = rec["prompt"]
        if rec["type"] != "return" or ("scores" not in rec and "logits" not in rec):
            continue
        draws += 1
        bad = False
        for what in ("scores", "logits"):
            for j, b in enumerate(rec.get(what) or []):
                prefix = tuple(prompt + rec["tokens"][:j])
                key = (what, prefix)
                if key not in expected_cache:
                    e = kernel.processed(prefix) if what == "scores" else kernel.logits(prefix)
                    expected_cache[key] = e.float().numpy()
                diff = _score_diff(expected_cache[key], _floats(b))
                if diff > SCORE_TOLERANCE:
                    positions[j + 1] = positions.get(j + 1, 0) + 1
                    bad = True
                    if first is None:
                        first = {"request": rec["req"], "position": j + 1, "record": what,
                                 "expected": np.round(expected_cache[key], 5).tolist(),
                                 "seen": np.round(_floats(b), 5).tolist()}
        mismatch += bad
    return {"draws": draws, "mismatch": mismatch, "positions": positions, "first_mismatch": first}


# ---------------------------------------------------------------------------------------------
# Collecting an arm
# ---------------------------------------------------------------------------------------------


def collect(cfg: TransformersConfig, arm: str, draws: int, campaign_seed: int, *, trace_path: str | None = None,
            level: str = "full", repair: str | None = None, start: int = 0,
            progress: Callable[..., None] | None = None, seed_arm: str | None = None,
            seal: str = "") -> ArmResult:
    """Draws `start .. start + draws - 1` of one arm (`off*` without speculation, `on*`, `repaired`),
    probed and traced; the trace is replayed against the contract (D2 needs level `full`)."""
    from dataclasses import asdict

    from badc_replay.arms import ArmSpec, collect_arm
    from badc_replay.repairs import load_intervention
    from badc_trace.engines.transformers import TransformersInstrumentor

    def setup() -> tuple[Callable[[int], str], Any]:
        h = Harness(cfg, speculative=not arm.startswith("off"))
        return h.draw, (load_intervention(repair).apply(h.model) if repair is not None else None)

    records = None
    if cfg.generation.get("output_scores") or cfg.generation.get("output_logits"):
        def records(path: str) -> dict[str, Any]:
            return check_records(path, Kernel(cfg))

    return collect_arm(ArmSpec(cfg.id, arm, draws, campaign_seed, start, seed_arm), TransformersInstrumentor(), setup,
                       engine="transformers", build=engine_version(), level=level, seal=seal, trace_path=trace_path,
                       trace_config={**asdict(cfg), "arm": arm}, progress=progress, progress_every=500,
                       records=records)
