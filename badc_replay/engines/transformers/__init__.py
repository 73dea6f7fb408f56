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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from badc_replay.calls import LogicalCall, processor_calls
from badc_replay.engine import Engine, Predicate, SimulatorCheck, nearest
from badc_replay.engines.transformers.config import TransformersConfig
from badc_replay.engines.transformers.contract import _text, check_request
from badc_replay.engines.transformers.harness import Harness
from badc_replay.engines.transformers.kernel import Kernel
from badc_replay.engines.transformers.program import ProgramKernels
from badc_replay.engines.transformers.records import check_records
from badc_replay.engines.transformers.schema import RECORDS
from badc_replay.engines.transformers.scores import score_request
from badc_replay.engines.transformers.simulator import SWITCHES, AssistedSimulator, laws_of
from badc_replay.engines.transformers.written_once import with_scores
from badc_replay.enumeration import ExactLaw
from badc_replay.exact import SpeculativeLaw
from badc_replay.scores import RequestScores
from badc_replay.violations import Violation
from badc_trace.checkpoints import ModelSpecError, enumerable, resolve_model
from badc_trace.outcomes import parse_outcome


def _watermark_problems(wm: Any, version: str) -> list[str]:
    """`generation.watermarking_config` as a table: SynthID's, built by the harness as
    SynthIDTextWatermarkingConfig(**keys): every key one of its parameters, each value of its type."""
    if wm is None:
        return []
    where = "generation.watermarking_config"
    if not isinstance(wm, Mapping):
        return [f"key {where!r}: a table {{ type = \"synthid\", keys = [...], ngram_len = N }}, got {wm!r}"]
    import inspect

    from transformers import SynthIDTextWatermarkingConfig

    kind = wm.get("type")
    if kind != "synthid":
        return [f"key '{where}.type': {kind!r} is not a watermark badc builds ({nearest(str(kind), ['synthid'])})"]
    params = {k: p for k, p in inspect.signature(SynthIDTextWatermarkingConfig.__init__).parameters.items()
              if k != "self"}
    found = [f"unknown key '{where}.{k}' for transformers {version}'s SynthIDTextWatermarkingConfig "
             f"({nearest(k, list(params))})" for k in wm if k != "type" and k not in params]
    found += [f"key '{where}.{k}' is required" for k, p in params.items()
              if p.default is inspect.Parameter.empty and k not in wm]
    keys, ngram = wm.get("keys"), wm.get("ngram_len")
    if "keys" in wm and not (isinstance(keys, list) and keys and all(type(k) is int for k in keys)):
        found.append(f"key '{where}.keys': a non-empty list of integers, got {keys!r}")
    if "ngram_len" in wm and not (type(ngram) is int and ngram >= 1):
        found.append(f"key '{where}.ngram_len': an integer >= 1, got {ngram!r}")
    return found


def _simulated(hypothesis: str) -> Callable[[TransformersConfig], ExactLaw]:
    return lambda cfg: laws_of(cfg).simulated(**SWITCHES[hypothesis])


HYPOTHESES = {h: _simulated(h) for h in SWITCHES}


def _max_new_tokens(cfg: TransformersConfig) -> Predicate:
    """More than max_new_tokens new tokens returned."""
    return lambda y: len(parse_outcome(y).tokens) > cfg.max_new_tokens


def _stop_strings(cfg: TransformersConfig) -> Predicate:
    """A stop string completed before the last returned token (generation went on past a stop the
    sequential engine would have honoured)."""
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


PREDICATES = {"max_new_tokens": _max_new_tokens, "stop_strings": _stop_strings}


class TransformersEngine(Engine[TransformersConfig]):
    name = "transformers"
    package = "transformers"
    record_schema = RECORDS
    config_class = TransformersConfig
    trace_level = "full"  # D2 replay compares each processor's recorded scores
    hypotheses = HYPOTHESES
    predicates = PREDICATES
    simulator_metric = "max abs difference"
    progress_every = 500

    def parse_config(self, d: Mapping[str, Any]) -> TransformersConfig:
        return super().parse_config({k: v for k, v in d.items() if k != "arm"})  # a trace header's config has it

    def check_native(self, cfg: TransformersConfig) -> list[str]:
        import inspect

        from transformers import GenerationConfig, GenerationMixin

        valid = set(GenerationConfig().to_dict()) | set(inspect.signature(GenerationMixin.generate).parameters)
        valid |= {"tokenizer"}  # taken from **kwargs by generate() (stop strings)
        valid -= {"self", "inputs", "kwargs"}
        found = [f"unknown key 'generation.{k}' for transformers {self.version()}'s generate() "
                 f"({nearest(k, valid)})" for k in cfg.generation if k not in valid]
        found += _watermark_problems(cfg.generation.get("watermarking_config"), self.version())
        draft = cfg.drafter.get("model")
        if isinstance(draft, str) and not enumerable(draft):
            try:
                resolve_model(draft)
            except ModelSpecError as e:
                found.append(f"key 'drafter.model': {e}")
        return found

    def harness(self, cfg: TransformersConfig, speculative: bool) -> Harness:
        return Harness(cfg, speculative)

    def returns_records(self, cfg: TransformersConfig) -> bool:
        return bool(cfg.generation.get("output_scores") or cfg.generation.get("output_logits"))

    def check_records(self, cfg: TransformersConfig, harness: Harness, trace_path: str) -> dict[str, Any]:
        return check_records(trace_path, Kernel(cfg))

    def reference_law(self, cfg: TransformersConfig) -> ExactLaw:
        return laws_of(cfg).reference()

    def speculative_law(self, cfg: TransformersConfig, patches: Sequence[str] = (),
                        soundness: int = 0) -> SpeculativeLaw:
        from badc_replay.engines.transformers import exact

        return exact.speculative_law(cfg, patches, soundness)

    def outcome_texts(self, cfg: TransformersConfig, outcomes: Sequence[str]) -> dict[str, str]:
        from badc_replay.engines.transformers import exact

        return exact.outcome_texts(cfg, outcomes)

    def simulator_check(self, cfg: TransformersConfig) -> SimulatorCheck:
        """With fresh processors at every position and sequential stopping, the simulator must reproduce P:
        the largest absolute difference (float32 block-versus-step logits: ~1e-7)."""
        laws = laws_of(cfg)
        p, q = laws.reference().law, laws.simulated("fresh", "sequential").law
        return SimulatorCheck(self.simulator_metric, max(abs(p.get(y, 0.0) - q.get(y, 0.0)) for y in set(p) | set(q)))

    def replay_context(self, header: Mapping[str, Any],
                       vocab: list[bytes] | None = None) -> tuple[Kernel | ProgramKernels | None, str | None]:
        """The kernel for D2/D3 when the trace's build is the one installed here (a campaign config's, or
        each request's rebuilt from the program's recorded arguments); else why not."""
        try:
            version = self.version()
        except Exception:
            return None, ("D2 and D3 not checked: transformers is not installed here (replay under the build's "
                          "interpreter)")
        if header.get("build") != version:
            return None, (f"D2 and D3 not checked: the trace is from transformers {header.get('build')}, {version} "
                          "is here")
        config = header.get("config", {})
        if not (isinstance(config, Mapping) and "id" in config):  # a program's trace: its requests say how
            return ProgramKernels(), None
        arm = str(config.get("arm", "on"))
        applied = [str(r) for r in config.get("applied", ())]
        named = config.get("repair") if arm == "repaired" else None
        patches = None if arm == "repaired" and not named else [*applied, *([str(named)] if named else [])]
        try:
            return Kernel(self.parse_config(config), arm, patches), None
        except (TypeError, ValueError, KeyError) as e:
            return None, f"D2 and D3 not checked: the trace header's config is not a transformers config ({e})"

    # Each reads the scores the probe wrote once (written_once.py) as every call's own.

    def check_request(self, records: list[dict[str, Any]], config: Mapping[str, Any],
                      context: Kernel | None = None) -> list[Violation]:
        return check_request(with_scores(records), config, context)

    def score_request(self, request: int, records: list[dict[str, Any]],
                      context: Kernel | ProgramKernels) -> RequestScores:
        return score_request(request, with_scores(records), context)

    def logical_calls(self, records: list[dict[str, Any]]) -> list[LogicalCall]:
        """Verification and ordinary steps: a prompt-lookup filter call's placeholder scores and a draft
        model's calls belong to no position of the returned sequence."""
        records = with_scores(records)
        return [c for c in processor_calls(records) if records[c.record].get("role") in ("verify", "step")]


ENGINE = TransformersEngine()

__all__ = ["ENGINE", "HYPOTHESES", "SWITCHES", "AssistedSimulator", "Harness", "Kernel", "TransformersConfig",
           "TransformersEngine", "check_records", "check_request"]
