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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from badc_replay.engine import Engine, Predicate, SimulatorCheck
from badc_replay.engines.llama_cpp.config import LlamaConfig
from badc_replay.engines.llama_cpp.contract import check_request
from badc_replay.engines.llama_cpp.features import parity_violations
from badc_replay.engines.llama_cpp.harness import Harness
from badc_replay.engines.llama_cpp.kernel import KernelAdapter, LogitOracle
from badc_replay.engines.llama_cpp.records import check_records
from badc_replay.engines.llama_cpp.schema import RECORDS
from badc_replay.enumeration import ExactLaw
from badc_replay.exact import SpeculativeLaw
from badc_replay.violations import Violation
from badc_trace.outcomes import parse_outcome

# The hypotheses' switches of the kernel adapter.
SWITCHES = {
    # H-D1-phys: processors read the evaluation buffer, logits are taken at the logical prefix.
    "H-D1-phys": {"processor_view": "physical", "postcheck_view": "logical"},
    # H-D3-postcheck: the stopping re-check after the loop reads the buffer with unrolled drafts.
    "H-D3-postcheck": {"processor_view": "logical", "postcheck_view": "physical"},
}



def _hypothesis(hypothesis: str) -> Callable[[LlamaConfig], ExactLaw]:
    return lambda cfg: KernelAdapter(cfg, speculative=True, **SWITCHES[hypothesis]).exact_law()


HYPOTHESES = {h: _hypothesis(h) for h in SWITCHES}


def _allowed_tokens(cfg: LlamaConfig) -> Predicate:
    """A returned token outside the parity processor's allowed set at its position."""
    # Absolute positions: a prompt given as text is one token per character on the tiny model.
    n_prompt = len(cfg.prompt)
    return lambda y: parity_violations(parse_outcome(y).tokens, n_prompt)


PREDICATES = {"allowed_tokens": _allowed_tokens}


class LlamaCppEngine(Engine[LlamaConfig]):
    name = "llama_cpp"
    package = "llama-cpp-python"
    record_schema = RECORDS
    config_class = LlamaConfig
    hypotheses = HYPOTHESES
    predicates = PREDICATES
    simulator_metric = "max abs difference"

    def harness(self, cfg: LlamaConfig, speculative: bool) -> Harness:
        return Harness(cfg, speculative)

    def check_native(self, cfg: LlamaConfig) -> list[str]:
        """A GBNF grammar is parsed by llama.cpp itself against the model's vocabulary, as the sampler chain
        will (llama_sampler_init_grammar: NULL when the grammar does not parse); the model is loaded once."""
        if not cfg.grammar:
            return []
        import llama_cpp

        from badc_replay.engines.llama_cpp.harness import load_llama

        llm = load_llama(cfg)
        sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, cfg.grammar.encode(), b"root")
        if not sampler:
            return ["key 'grammar': llama.cpp does not parse it as GBNF with a rule 'root' (its parser's message "
                    "is on the worker's stderr)"]
        llama_cpp.llama_sampler_free(sampler)
        return []

    def trace_config(self, cfg: LlamaConfig, arm: str) -> dict[str, Any]:
        return {"id": cfg.id, "arm": arm, "processors": cfg.processors, "stopping": cfg.stopping}

    def returns_records(self, cfg: LlamaConfig) -> bool:
        return cfg.sampling.get("logprobs") is not None

    def check_records(self, cfg: LlamaConfig, harness: Harness, trace_path: str) -> dict[str, Any]:
        return check_records(trace_path, LogitOracle(harness))

    def reference_law(self, cfg: LlamaConfig) -> ExactLaw:
        return KernelAdapter(cfg).exact_law()

    def speculative_law(self, cfg: LlamaConfig, patches: Sequence[str] = (), soundness: int = 0) -> SpeculativeLaw:
        from badc_replay.engines.llama_cpp import exact

        return exact.speculative_law(cfg, patches, soundness)

    def outcome_texts(self, cfg: LlamaConfig, outcomes: Sequence[str]) -> dict[str, str]:
        from badc_replay.engines.llama_cpp import exact

        return exact.outcome_texts(cfg, outcomes)

    def simulator_check(self, cfg: LlamaConfig) -> SimulatorCheck:
        """With every speculation-sensitive read set to its logical value, the speculative enumeration
        must reproduce P: the largest absolute difference (0 up to summation order)."""
        p = self.reference_law(cfg).law
        q = KernelAdapter(cfg, speculative=True, processor_view="logical", postcheck_view="logical").exact_law().law
        return SimulatorCheck(self.simulator_metric, max(abs(p.get(y, 0.0) - q.get(y, 0.0)) for y in set(p) | set(q)))

    def check_request(self, records: list[dict[str, Any]], config: Mapping[str, Any],
                      context: Any = None) -> list[Violation]:
        return check_request(records, config)


ENGINE = LlamaCppEngine()

__all__ = ["ENGINE", "HYPOTHESES", "Harness", "KernelAdapter", "LlamaConfig", "LlamaCppEngine", "LogitOracle",
           "check_records", "check_request"]
