"""The exact channel for transformers: mu of assisted decoding with prompt lookup, enumerated through the
live engine (live).

`generate()` runs as a user runs it, its own candidate generator, processors, cache crops and stopping
criteria included; only `torch.multinomial` is scripted. In assisted decoding with prompt lookup one
`torch.multinomial` call samples every verification row at once (sample-and-match), and the engine keeps
row i + 1 only when row i drew the candidate token. So the script draws row 0, then row i + 1 only where
row i equals the candidate (read from the candidate generator's own return). The rows after the first
miss get a filler token; the soundness pass re-runs leaves with other fillers and counts any outcome that
moves.

A draft model's candidates are themselves sampled and accepted by the min(1, p/q) rule with a residual
draw: not scripted here (UNSUPPORTED, with the reason).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from badc_replay.engines.transformers.config import TransformersConfig
from badc_replay.engines.transformers.harness import Harness
from badc_replay.enumeration import Choose, enumerate_law, run_script
from badc_replay.exact import UNSUPPORTED, ExactUnavailable, Soundness, SpeculativeLaw

PRUNING = ("re-run with other fillers: rows after the first row that missed its candidate get a filler "
           "token")


def row_kept(before_kept: bool, before: int, candidate: int) -> bool:
    """Whether the engine can keep verification row i >= 1: every row before it was kept and drew its
    candidate (`before` is row i - 1's token, a filler when that row was not kept). That is sample-and-match
    itself, in every release. Rows past the length budget and the bonus row of a block whose candidates end
    the request are drawn too, not pruned: 5.17 discards them, but 5.12 keeps rows past the budget (it
    returns more than max_new_tokens), and the soundness pass found leaves of a rule that pruned them
    reaching other outcomes on 5.12."""
    return before_kept and before == candidate


def scripted_multinomial(candidates: list[int], choose: Callable[[np.ndarray], int],
                         filler: Callable[[int, np.ndarray], int]) -> Callable[..., Any]:
    """`torch.multinomial` for a generate() with prompt lookup (or none): a verification block's rows (as many
    as the current `candidates` plus one) draw in order through `choose` while each kept row drew its
    candidate, the others get `filler(row, probs)`; any other call draws each row through `choose`."""
    import torch

    def multinomial(probs: Any, num_samples: int = 1, *a: Any, **k: Any) -> Any:
        rows = probs.reshape(-1, probs.shape[-1]).double().numpy()
        if rows.shape[0] != len(candidates) + 1:  # not a verification block: an ordinary draw
            return torch.tensor([[choose(r / r.sum())] for r in rows])
        out: list[int] = []
        kept = True
        for i, r in enumerate(rows):
            kept = i == 0 or row_kept(kept, out[i - 1], candidates[i - 1])
            out.append(choose(r / r.sum()) if kept else filler(i, r))
        return torch.tensor(out).reshape(-1, 1)

    return multinomial


@contextlib.contextmanager
def candidates_watched(model: Any, candidates: list[int], proposed: list[int] | None = None) -> Iterator[None]:
    """While inside, `candidates` holds the current verification block's candidate tokens, read from the
    candidate generator's own return (and `proposed[0]` counts them)."""
    def candidate_generator(*a: Any, **k: Any) -> Any:
        gen = type(model)._get_candidate_generator(model, *a, **k)
        get = gen.get_candidates

        def get_candidates(input_ids: Any, *ga: Any, **gk: Any) -> Any:
            out = get(input_ids, *ga, **gk)
            candidates[:] = [int(t) for t in out[0][0, int(input_ids.shape[1]):].tolist()]
            if proposed is not None:
                proposed[0] += len(candidates)
            return out

        gen.get_candidates = get_candidates
        return gen

    model._get_candidate_generator = candidate_generator
    try:
        yield
    finally:
        del model._get_candidate_generator


def speculative_law(cfg: TransformersConfig, patches: Sequence[str] = (), soundness: int = 0) -> SpeculativeLaw:
    if cfg.drafter.get("method") != "prompt_lookup":
        raise ExactUnavailable(UNSUPPORTED, "a draft model's stochastic proposal: its candidates are sampled by "
                                            "another generate() and accepted by min(1, p/q) with a residual draw; "
                                            "only prompt lookup is scripted")
    from badc_replay.repairs import load_intervention

    h = Harness(cfg, speculative=True)
    undos = [load_intervention(rid).apply(h.repair_target) for rid in patches]
    candidates: list[int] = []  # the current verification block's, from the candidate generator
    proposed = [0]
    filler = [lambda row, probs: 0]  # the token a discarded row gets (the soundness pass varies it)

    def run(choose: Choose) -> str:
        with candidates_watched(h.model, candidates, proposed):
            return h.scripted(scripted_multinomial(candidates, choose, lambda i, r: filler[0](i, r)))

    try:
        law = enumerate_law(run, what=f"config {cfg.id}", keep_leaves=soundness > 0)
        drafted = proposed[0]  # before the soundness pass re-runs leaves
        mismatches = 0
        leaves = random.Random(f"{cfg.id}|soundness").sample(law.leaves, min(soundness, len(law.leaves)))
        for script, outcome in leaves:
            rng = np.random.default_rng([len(script), *script])
            filler[0] = lambda i, r, rng=rng: int(rng.integers(r.shape[0]))
            mismatches += run_script(run, script) != outcome
        filler[0] = lambda i, r: 0
    finally:
        for undo in reversed(undos):
            if callable(undo):
                undo()
    return SpeculativeLaw(law.law, law.paths, drafted,
                          Soundness(len(leaves), mismatches, PRUNING) if soundness else Soundness(rule=PRUNING))


def outcome_texts(cfg: TransformersConfig, outcomes: Sequence[str]) -> dict[str, str]:
    from badc_replay.engines.transformers.harness import load_tokenizer
    from badc_trace.outcomes import parse_outcome

    tok = load_tokenizer(cfg.model)
    return {y: tok.decode(list(parse_outcome(y).tokens)) for y in outcomes if not parse_outcome(y).crash}
