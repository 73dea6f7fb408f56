"""llama-cpp-python: the harness (config -> engine call -> outcome) and the kernel adapter.

The kernel adapter enumerates exact output laws by driving the engine itself with *scripted
sampling*: `Llama.sample` is replaced on one instance by a function that computes the processed
next-token law at the position being sampled and returns a token chosen by the enumerator. Prompt
handling, processor calls and their state, stopping criteria, stop strings, EOS handling and the
return map are therefore the engine's own (adapter conditions A1, A2, A4); processors are created
fresh for every enumerated path and replayed along it (A3). Only the C sampler chain, which runs
inside llama.cpp, is mirrored in numpy (`mirror_chain`), each step citing the vendored source.

The same enumeration with speculation on gives an executable hypothesis: the law the engine returns
when each sample call draws fresh randomness from the law it computes. Two switches set the
speculation-sensitive reads to their logical values:

- `processor_view="logical"`: processors see the position's logical prefix instead of the
  evaluation buffer (`self._input_ids`, which holds unverified drafts) -- H-D1-phys's read;
- `postcheck_view="logical"`: the stopping re-check after the loop in `_create_completion` sees the
  tokens sequential decoding would have evaluated instead of the buffer -- H-D3-postcheck's read.

With both logical, speculation-on enumeration must reproduce P (the speculation-off law) to 1e-12.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from badc_replay.arms import ArmResult
from badc_replay.enumeration import Choose, ExactLaw, enumerate_law
from badc_trace.outcomes import format_outcome

# ---------------------------------------------------------------------------------------------
# Registered features: processors, stopping criteria, predicates
# ---------------------------------------------------------------------------------------------

EOS = 2
# Harness processor of the paper's LCP-1: different allowed sets at even and odd absolute positions.
PARITY_ALLOWED = {0: frozenset({3, 5, 7, 9, EOS}), 1: frozenset({4, 6, 8, EOS})}


class ParityProcessor:
    """Allows PARITY_ALLOWED[pos % 2] at absolute position pos = len(input_ids) (0-based)."""

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        allowed = PARITY_ALLOWED[len(input_ids) % 2]
        mask = np.array([i not in allowed for i in range(len(scores))])
        scores[mask] = -np.inf
        return scores


class LastIdStop:
    """Stopping criterion of LCP-3: stop when the last id seen is `token`."""

    def __init__(self, token: int):
        self.token = token

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> bool:
        return len(input_ids) > 0 and int(input_ids[-1]) == self.token


def make_processors(specs: list[Mapping[str, Any]], eos: int = EOS) -> list[Callable]:
    from llama_cpp.llama import MinTokensLogitsProcessor

    out: list[Callable] = []
    for spec in specs:
        name = spec["name"]
        if name == "parity":
            out.append(ParityProcessor())
        elif name == "min_tokens":
            out.append(MinTokensLogitsProcessor(int(spec["min_tokens"]), eos))
        else:
            raise ValueError(f"llama_cpp: unknown processor {name!r} (known: parity, min_tokens)")
    return out


def make_stopping(specs: list[Mapping[str, Any]]) -> list[Callable]:
    out: list[Callable] = []
    for spec in specs:
        if spec["name"] == "last_id":
            out.append(LastIdStop(int(spec["token"])))
        else:
            raise ValueError(f"llama_cpp: unknown stopping criterion {spec['name']!r} (known: last_id)")
    return out


def parity_violations(outcome_tokens: tuple[int, ...], prompt_len: int) -> bool:
    return any(t not in PARITY_ALLOWED[(prompt_len + j) % 2] for j, t in enumerate(outcome_tokens))


# ---------------------------------------------------------------------------------------------
# The C sampler chain, mirrored (vendor/llama.cpp/src/llama-sampler.cpp in llama-cpp-python 0.3.36)
# ---------------------------------------------------------------------------------------------

SUPPORTED_SAMPLING = {"temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty",
                      "frequency_penalty", "presence_penalty", "logit_bias", "stop", "seed", "logprobs"}
RECORD_TOLERANCE = 1e-4  # |returned logprob - documented logprob|; batch vs step evaluation differs ~1e-6
CREATE_COMPLETION_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "typical_p": 1.0,
                              "repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
PENALTY_LAST_N = 64  # Llama.last_n_tokens_size default


def grammar_mask(llm: Any, grammar: Any, accepted: list[int]) -> np.ndarray:
    """Tokens the grammar allows after `accepted`, from llama.cpp's own grammar sampler
    (llama_sampler_grammar_apply, llama-sampler.cpp:2680), fresh and replayed along the prefix."""
    import ctypes

    import llama_cpp

    n = llm.n_vocab()
    gs = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, grammar._grammar.encode(), grammar._root.encode())
    try:
        for t in accepted:
            llama_cpp.llama_sampler_accept(gs, t)
        data = (llama_cpp.llama_token_data * n)()
        for i in range(n):
            data[i].id, data[i].logit, data[i].p = i, 0.0, 0.0
        arr = llama_cpp.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(gs, ctypes.byref(arr))
        allowed = np.ones(n, dtype=bool)
        for i in range(arr.size):
            if not np.isfinite(data[i].logit):
                allowed[data[i].id] = False
        return allowed
    finally:
        llama_cpp.llama_sampler_free(gs)


def mirror_chain(logits: np.ndarray, params: Mapping[str, float], accepted: list[int],
                 allowed: np.ndarray | None = None) -> np.ndarray:
    """The law `dist` samples from, after Llama._init_sampler's chain (llama.py 0.3.36, _init_sampler):
    custom processors (applied by the caller) -> penalties -> grammar (`allowed`) -> top_k -> typical
    -> top_p -> min_p -> temp -> dist."""
    x = logits.astype(np.float32).copy()
    keep = np.ones(len(x), dtype=bool)
    rep, freq, pres = params["repeat_penalty"], params["frequency_penalty"], params["presence_penalty"]
    # llama_sampler_penalties_apply (llama-sampler.cpp:2950): is_disabled() when all neutral; counts
    # over the last penalty_last_n *accepted* (sampled) tokens -- prompt tokens are never accepted.
    if rep != 1.0 or freq != 0.0 or pres != 0.0:
        window = accepted[-PENALTY_LAST_N:]
        for tok in set(window):
            count = window.count(tok)
            x[tok] = x[tok] * np.float32(rep) if x[tok] <= 0 else x[tok] / np.float32(rep)
            x[tok] -= np.float32(count * freq + (count > 0) * pres)
    if allowed is not None:
        x[~allowed] = -np.inf
    temp = params["temperature"]
    if temp < 0:  # _init_sampler: dist only
        return _softmax(x, keep)
    if temp == 0:  # greedy
        out = np.zeros(len(x))
        out[int(np.argmax(x))] = 1.0
        return out
    keep &= np.isfinite(x) | (x > 0)
    # llama_sampler_top_k_impl (:321): k <= 0 disables; keeps the k largest logits.
    k = int(params["top_k"])
    if 0 < k < keep.sum():
        order = np.argsort(-np.where(keep, x, -np.inf), kind="stable")
        keep[order[k:]] = False
    if params["typical_p"] < 1.0:
        raise NotImplementedError("llama_cpp mirror: typical_p < 1 is not mirrored")
    # llama_sampler_top_p_apply (:1549): softmax over the current candidates (float32), sorted
    # descending, keep the shortest prefix whose cumulative probability reaches p (min_keep 1).
    top_p = params["top_p"]
    if top_p < 1.0:
        p = _softmax(x, keep).astype(np.float32)
        order = [i for i in np.argsort(-np.where(keep, x, -np.inf), kind="stable") if keep[i]]
        cum = np.float32(0)
        last = len(order)
        for j, i in enumerate(order):
            cum = np.float32(cum + p[i])
            if cum >= np.float32(top_p):
                last = j + 1
                break
        for i in order[last:]:
            keep[i] = False
    # llama_sampler_min_p_apply (:1749): keep logit >= max_logit + logf(p).
    min_p = params["min_p"]
    if min_p > 0:
        max_logit = np.max(x[keep])
        keep &= x >= np.float32(max_logit + np.float32(math.log(min_p)))
    # llama_sampler_temp_impl (:265): logits /= temp; llama_sampler_dist_apply (:1150): softmax.
    return _softmax(x / np.float32(temp), keep)


def _softmax(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    z = np.where(keep, x.astype(np.float64), -np.inf)
    z = np.exp(z - z[keep].max())
    return z / z.sum()


# ---------------------------------------------------------------------------------------------
# Harness: one configuration, one engine instance per arm
# ---------------------------------------------------------------------------------------------


@dataclass
class LlamaConfig:
    """The llama_cpp part of a campaign config (DESIGN.md, "Campaign file")."""

    id: str
    model: str = "tiny"
    prompt: str | list[int] = "abcdabcdab"
    max_new_tokens: int = 4
    api: str = "create_completion"  # or "generate"
    drafter: dict[str, Any] = field(default_factory=lambda: {"method": "prompt_lookup", "num_pred_tokens": 3,
                                                             "max_ngram_size": 2})
    sampling: dict[str, Any] = field(default_factory=dict)
    processors: list[dict[str, Any]] = field(default_factory=list)
    stopping: list[dict[str, Any]] = field(default_factory=list)
    grammar: str | None = None  # GBNF text

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LlamaConfig:
        cfg = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
        bad = set(cfg.sampling) - SUPPORTED_SAMPLING
        if bad:
            raise ValueError(f"config {cfg.id}: sampling keywords not mirrored for llama_cpp: {sorted(bad)}")
        if cfg.api not in ("create_completion", "generate"):
            raise ValueError(f"config {cfg.id}: api must be create_completion or generate")
        return cfg

    def params(self) -> dict[str, float]:
        p = dict(CREATE_COMPLETION_DEFAULTS)
        p.update({k: v for k, v in self.sampling.items() if k in p})
        return p


def load_llama(cfg: LlamaConfig, **kwargs: Any) -> Any:
    """A Llama on the config's model: the embedded tiny model ("tiny", "tiny:SEED") or a GGUF path."""
    from badc_trace.tiny import llama_cpp as tiny
    from badc_trace.tiny import parse_model_spec

    seed = parse_model_spec("llama_cpp", cfg.model)
    if seed is not None:
        return tiny.load(seed, **kwargs)
    from llama_cpp import Llama

    return Llama(model_path=cfg.model, n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False, **kwargs)


class Harness:
    """Runs one configuration on one Llama instance and returns outcome strings."""

    def __init__(self, cfg: LlamaConfig, speculative: bool):
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.cfg = cfg
        draft = None
        if speculative:
            if cfg.drafter.get("method") != "prompt_lookup":
                raise ValueError(f"config {cfg.id}: llama_cpp drafter must be prompt_lookup")
            draft = LlamaPromptLookupDecoding(num_pred_tokens=int(cfg.drafter.get("num_pred_tokens", 10)),
                                              max_ngram_size=int(cfg.drafter.get("max_ngram_size", 2)))
        # logprobs need logits_all (create_completion refuses otherwise); a draft model forces it anyway.
        self.llm = load_llama(cfg, draft_model=draft, logits_all=cfg.sampling.get("logprobs") is not None)
        self.prompt_tokens = (list(cfg.prompt) if isinstance(cfg.prompt, list)
                              else self.llm.tokenize(cfg.prompt.encode(), add_bos=False, special=False))
        self.yielded: list[int] = []
        self.generator_returned = False
        self.in_generate = False
        self._wrap_generate()

    def _wrap_generate(self) -> None:
        # Records the ids generate() yields on this instance only (no global patching): the returned
        # ids of create_completion are a prefix of them (usage.completion_tokens).
        from badc_trace.engines.llama_cpp import tracked

        original = self.llm.generate
        self.llm.generate = lambda *args, **kwargs: tracked(self, original(*args, **kwargs))

    def call(self, seed: int, wrap_stop: Callable[[Callable], Callable] | None = None) -> str:
        """One draw with fresh processors and stopping criteria; returns the outcome string."""
        from llama_cpp.llama import LogitsProcessorList, StoppingCriteriaList

        cfg, llm = self.cfg, self.llm
        from llama_cpp.llama_grammar import LlamaGrammar

        procs = LogitsProcessorList(make_processors(cfg.processors, llm.token_eos())) if cfg.processors else None
        grammar = LlamaGrammar.from_string(cfg.grammar, verbose=False) if cfg.grammar else None
        stops = None
        if cfg.stopping:
            crits = make_stopping(cfg.stopping)
            stops = StoppingCriteriaList([wrap_stop(c) for c in crits] if wrap_stop else crits)
        params = cfg.params()
        if cfg.api == "generate":
            llm.set_seed(seed)
            toks: list[int] = []
            code = "stop"
            for tok in llm.generate(self.prompt_tokens, top_k=params["top_k"], top_p=params["top_p"],
                                    min_p=params["min_p"], typical_p=params["typical_p"], temp=params["temperature"],
                                    repeat_penalty=params["repeat_penalty"],
                                    frequency_penalty=params["frequency_penalty"],
                                    presence_penalty=params["presence_penalty"], logits_processor=procs,
                                    stopping_criteria=stops, grammar=grammar):
                if tok == llm.token_eos():
                    code = "eos"
                    break
                toks.append(int(tok))
                if len(toks) >= cfg.max_new_tokens:
                    code = "length"
                    break
            return format_outcome(toks, code)
        kwargs = {k: v for k, v in cfg.sampling.items() if k != "seed"}
        if "logit_bias" in kwargs:
            kwargs["logit_bias"] = {int(k): float(v) for k, v in kwargs["logit_bias"].items()}
        out = llm.create_completion(self.prompt_tokens, max_tokens=cfg.max_new_tokens, seed=seed,
                                    logits_processor=procs, stopping_criteria=stops, grammar=grammar, **{
                                        **{k: v for k, v in params.items()}, **kwargs})
        choice = out["choices"][0]
        n = out["usage"]["completion_tokens"]
        return format_outcome(self.yielded[:n], choice["finish_reason"] or "none")

    def draw(self, seed: int) -> str:
        """One draw as the caller sees it, with a processor exception (swallowed by ctypes, so the
        completion goes on) turned into a crash outcome when the probe is installed."""
        from badc_trace.engines.llama_cpp import LlamaCppInstrumentor

        probe = LlamaCppInstrumentor()
        try:
            outcome = self.call(seed)
        except Exception as e:  # an exception raised to the caller is a crash outcome too
            return format_outcome([], f"crash:{type(e).__name__}")
        last = probe.last_request if probe.is_instrumented else None
        if last is not None and last.crash:
            return format_outcome([], f"crash:{last.crash}")
        return outcome


# ---------------------------------------------------------------------------------------------
# Kernel adapter: exact laws by scripted enumeration
# ---------------------------------------------------------------------------------------------


class LogitOracle:
    """Model logits at a logical prefix, evaluated as speculation-off decoding does: the prompt in one
    batch, then one token per step. Cached per prefix; the same floats feed every law of a config, so
    enumerations differ only where the schedule differs, not by batch-size rounding."""

    def __init__(self, harness: Harness):
        self.llm = load_llama(harness.cfg)
        self.prompt = list(harness.prompt_tokens)
        self.n_vocab = self.llm.n_vocab()
        self._cache: dict[tuple[int, ...], np.ndarray] = {}
        self._state: list[int] = []

    def __call__(self, ids: np.ndarray | list[int]) -> np.ndarray:
        key = tuple(int(t) for t in ids)
        hit = self._cache.get(key)
        if hit is not None:
            return hit.copy()
        if list(key[: len(self.prompt)]) != self.prompt:
            raise ValueError("logit oracle: prefix does not start with the prompt")
        llm = self.llm
        common = 0
        for a, b in zip(self._state, key, strict=False):
            if a != b:
                break
            common += 1
        # The logits of the key's last position must come from evaluating it: when the key is a prefix
        # of what is in the cache, step back one token and evaluate that token again.
        common = min(common, len(key) - 1)
        if common < len(self.prompt):
            llm.reset()
            llm.eval(self.prompt)
            self._state = list(self.prompt)
        else:
            llm.n_tokens = common
            llm._ctx.kv_cache_seq_rm(-1, common, -1)
            self._state = list(key[:common])
        for t in key[len(self._state):]:
            llm.eval([t])
            self._state.append(t)
        logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(self.n_vocab,)).astype(np.float32)
        self._cache[key] = logits
        return logits.copy()


class KernelAdapter:
    """Exact output laws of a configuration, enumerated through the engine itself."""

    def __init__(self, cfg: LlamaConfig, speculative: bool = False, processor_view: str = "physical",
                 postcheck_view: str = "physical"):
        if processor_view not in ("physical", "logical") or postcheck_view not in ("physical", "logical"):
            raise ValueError("views are 'physical' or 'logical'")
        self.cfg = cfg
        self.speculative = speculative
        self.processor_view = processor_view
        self.postcheck_view = postcheck_view
        self.h = Harness(cfg, speculative)
        self.params = cfg.params()
        self.oracle = LogitOracle(self.h)
        self._choose: Choose | None = None
        self._accepted: list[int] = []
        self._install()

    def _install(self) -> None:
        llm, adapter = self.h.llm, self

        def sample(**kw: Any) -> int:
            idx = kw["idx"]
            # Logits at the position's logical prefix (positions <= idx hold committed tokens and
            # drafts accepted so far), from the oracle rather than the block evaluation.
            logits = adapter.oracle(llm.input_ids[: idx + 1])
            procs = kw.get("logits_processor")
            if procs:
                # As Llama._init_sampler's apply_func: every processor of the list, in order, on the
                # float32 logits, with the ids it reads (self._input_ids, or the logical prefix).
                ids = llm.input_ids[: idx + 1] if adapter.processor_view == "logical" else llm._input_ids
                for p in procs:
                    logits[:] = p(ids, logits)
            grammar = kw.get("grammar")
            allowed = None if grammar is None else grammar_mask(llm, grammar, adapter._accepted)
            tok = adapter._choose(mirror_chain(logits, adapter.params, adapter._accepted, allowed))
            adapter._accepted.append(tok)
            return tok

        llm.sample = sample

    def _logical_postcheck(self, crit: Callable) -> Callable:
        # The re-check after the loop in _create_completion reads self._input_ids; sequential decoding
        # would have evaluated the prompt and every yielded token except the last one when the caller
        # abandoned the generator (EOS, stop string, max_tokens), and all of them when a stopping
        # criterion ended it. Calls inside generate() already see the logical prefix.
        h = self.h

        def check(input_ids: np.ndarray, logits: np.ndarray) -> bool:
            if h.in_generate:
                return crit(input_ids, logits)
            n = len(h.yielded) if h.generator_returned else max(len(h.yielded) - 1, 0)
            return crit(np.asarray(h.prompt_tokens + h.yielded[:n], dtype=np.intc), logits)

        return check

    def _run(self, choose: Choose) -> str:
        self._choose = choose
        self._accepted = []
        wrap = self._logical_postcheck if self.postcheck_view == "logical" else None
        return self.h.call(seed=0, wrap_stop=wrap)

    def exact_law(self, max_paths: int = 200_000) -> ExactLaw:
        return enumerate_law(self._run, max_paths, what=f"config {self.cfg.id}")


# ---------------------------------------------------------------------------------------------
# Contract replay (D1, D3) of one request's records
# ---------------------------------------------------------------------------------------------


def check_request(records: list[dict[str, Any]], config: Mapping[str, Any]) -> list[Any]:
    """D1: every processor call must see exactly its position's logical prefix (the first
    `logical_len` ids of the buffer; any more are unverified drafts). D3: the stopping re-check after
    the loop must see what sequential decoding would have evaluated."""
    from badc_replay.contract import Violation

    out: list[Violation] = []
    req = next((r for r in records if r["type"] == "request"), None)
    ret = next((r for r in records if r["type"] == "return"), None)
    for i, rec in enumerate(records):
        if rec["type"] == "processor":
            ids, n = rec["ids"], rec["logical_len"]
            if len(ids) != n:
                extra = ids[n:]
                out.append(Violation(rec["req"], i, "D1",
                                     f"processor {rec['proc']} ({rec['name']}) at position {n - 1}",
                                     ids[:n], f"{n} ids (the logical prefix)",
                                     f"{len(ids)} ids, with unverified drafts {extra}" if len(ids) > n
                                     else f"{len(ids)} ids (a shorter prefix)"))
        elif rec["type"] == "stop_check" and rec["where"] == "postcheck" and req is not None and ret is not None:
            yielded = ret.get("yielded", [])
            # generate() returned (a criterion stopped it) -> all yielded ids were evaluated;
            # abandoned by the caller -> the last yielded id was never evaluated.
            returned = any(r["type"] == "stop_check" and r["where"] == "generate" and r["result"] for r in records)
            n = len(yielded) if returned else max(len(yielded) - 1, 0)
            expected = req["prompt"] + yielded[:n]
            if rec["ids"] != expected:
                extra = rec["ids"][len(expected):] if rec["ids"][: len(expected)] == expected else rec["ids"]
                out.append(Violation(rec["req"], i, "D3", "stopping re-check after the generation loop",
                                     expected, f"{len(expected)} ids (the evaluated committed prefix)",
                                     f"{len(rec['ids'])} ids, with unverified drafts {extra}"))
    return out


# ---------------------------------------------------------------------------------------------
# Collecting an arm
# ---------------------------------------------------------------------------------------------


def check_records(trace_path: str, oracle: LogitOracle) -> dict[str, Any]:
    """D4: each returned `token_logprobs[j]` against its documented value, the log-softmax of the raw
    model logits at the token's logical prefix (llama.py: `Llama.logits_to_logprobs(self._scores)`)."""
    from badc_trace.format import read_trace

    draws = mismatch = 0
    positions: dict[int, int] = {}
    first = None
    for rec in read_trace(trace_path, allow_torn_tail=True):
        if rec["type"] == "request":
            prompt = rec["prompt"]
        if rec["type"] != "return" or rec.get("logprobs") is None:
            continue
        draws += 1
        bad = False
        tokens = rec["tokens"]
        # _create_completion leaves BOS tokens out of the logprobs lists (`if token == bos_token_id:
        # continue`); the others keep their own rows.
        returned = iter(rec["logprobs"]["token_logprobs"])
        for j, tok in enumerate(tokens):
            if tok == oracle.llm.token_bos():
                continue
            lp = next(returned, None)
            logits = oracle(prompt + tokens[:j]).astype(np.float64)
            documented = float(logits[tok] - logits.max() - np.log(np.exp(logits - logits.max()).sum()))
            if lp is None or abs(lp - documented) > RECORD_TOLERANCE:
                positions[j + 1] = positions.get(j + 1, 0) + 1
                bad = True
                if first is None:
                    first = {"request": rec["req"], "position": j + 1, "token": tok, "expected": documented,
                             "seen": lp}
        mismatch += bad
    return {"draws": draws, "mismatch": mismatch, "positions": positions, "first_mismatch": first}


def collect(cfg: LlamaConfig, arm: str, draws: int, campaign_seed: int, *, trace_path: str | None = None,
            level: str = "calls", repair: str | None = None, start: int = 0,
            progress: Callable[..., None] | None = None, seed_arm: str | None = None,
            seal: str = "") -> ArmResult:
    """Draws `start .. start + draws - 1` of one arm (`on`, `off` or `repaired`), probed and traced;
    the trace is replayed against the contract when written at level calls or full. `seed_arm` draws
    with another arm's seeds (a repaired arm on the on-arm's seeds, for `badc diff`)."""
    from badc_replay.arms import ArmSpec, collect_arm
    from badc_replay.repairs import load_intervention
    from badc_trace.engines.llama_cpp import LlamaCppInstrumentor

    made: dict[str, Harness] = {}

    def setup() -> tuple[Callable[[int], str], None]:
        h = made["h"] = Harness(cfg, speculative=not arm.startswith("off"))
        if repair is not None:
            load_intervention(repair).apply(h.llm)
        return h.draw, None

    records = None
    if cfg.sampling.get("logprobs") is not None:
        def records(path: str) -> dict[str, Any]:
            return check_records(path, LogitOracle(made["h"]))

    return collect_arm(ArmSpec(cfg.id, arm, draws, campaign_seed, start, seed_arm), LlamaCppInstrumentor(), setup,
                       engine="llama_cpp", build=engine_version(), level=level, seal=seal, trace_path=trace_path,
                       trace_config={"id": cfg.id, "arm": arm, "processors": cfg.processors,
                                     "stopping": cfg.stopping},
                       progress=progress, progress_every=1000, records=records)


def engine_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("llama-cpp-python")


def config_from_dict(d: Mapping[str, Any]) -> LlamaConfig:
    return LlamaConfig.from_dict(d)


# ---------------------------------------------------------------------------------------------
# What a campaign worker needs: laws, predicates
# ---------------------------------------------------------------------------------------------

HYPOTHESES = {
    # H-D1-phys: processors read the evaluation buffer, logits are taken at the logical prefix.
    "H-D1-phys": {"processor_view": "physical", "postcheck_view": "logical"},
    # H-D3-postcheck: the stopping re-check after the loop reads the buffer with unrolled drafts.
    "H-D3-postcheck": {"processor_view": "logical", "postcheck_view": "physical"},
}


def reference_law(cfg: LlamaConfig) -> ExactLaw:
    return KernelAdapter(cfg).exact_law()


def hypothesis_law(cfg: LlamaConfig, hypothesis: str) -> ExactLaw:
    if hypothesis not in HYPOTHESES:
        raise ValueError(f"config {cfg.id}: unknown llama_cpp hypothesis {hypothesis!r}; "
                         f"known: {', '.join(HYPOTHESES)}")
    return KernelAdapter(cfg, speculative=True, **HYPOTHESES[hypothesis]).exact_law()


def simulator_check(cfg: LlamaConfig) -> float:
    """With every speculation-sensitive read set to its logical value, the speculative enumeration
    must reproduce P: the largest absolute difference (0 up to summation order)."""
    p = reference_law(cfg).law
    q = KernelAdapter(cfg, speculative=True, processor_view="logical", postcheck_view="logical").exact_law().law
    return max(abs(p.get(y, 0.0) - q.get(y, 0.0)) for y in set(p) | set(q))


def predicate(name: str, cfg: LlamaConfig) -> Callable[[str], bool]:
    """Registered witness predicates: a function of an outcome string, True when it violates."""
    from badc_trace.outcomes import parse_outcome

    if name == "allowed_tokens":
        # Absolute positions: a prompt given as text is one token per character on the tiny model.
        n_prompt = len(cfg.prompt)
        return lambda y: parity_violations(parse_outcome(y).tokens, n_prompt)
    raise ValueError(f"config {cfg.id}: unknown predicate {name!r} (known: allowed_tokens)")
