"""Kernel: the engine itself with speculation off and scripted sampling, its factories, logits and exact laws (live)."""

from __future__ import annotations

import collections
import copy
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from badc_replay.engines.transformers.config import TransformersConfig
from badc_replay.engines.transformers.harness import Harness, draft_model_kwargs, prompt_lookup_kwargs
from badc_replay.enumeration import Choose, ExactLaw, enumerate_law


class _Captured(Exception):
    def __init__(self, processors: Any, stopping: Any):
        self.processors, self.stopping = processors, stopping


class _Lru:
    """The most recently used entries of a cache: at most `entries`, whose `size(key, value)` add up to at most
    `budget` (the last one kept whatever its size). Replay's caches pay off across the draws of one
    configuration on a tiny model; on a real vocabulary a score vector is 196 KB, and a trace of thousands of
    requests with other prefixes must not grow replay's memory without end."""

    def __init__(self, entries: float, budget: float = math.inf, size: Callable[[Any, Any], int] = lambda k, v: 0):
        self.entries, self.budget, self._size = entries, budget, size
        self._d: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self._bytes = 0

    def get(self, key: Any) -> Any:
        value = self._d.get(key)
        if value is not None:
            self._d.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> Any:
        if key in self._d:
            self._bytes -= self._size(key, self._d.pop(key))
        self._d[key] = value
        self._bytes += self._size(key, value)
        while len(self._d) > self.entries or (self._bytes > self.budget and len(self._d) > 1):
            self._bytes -= self._size(*self._d.popitem(last=False))
        return value


def _scores_bytes(key: Any, value: Any) -> int:
    return sum(len(k) for k in key if isinstance(k, bytes)) + int(np.asarray(value).nbytes)


class Kernel:
    """The sequential kernel of one configuration: model logits at a prefix, fresh processors and
    stopping criteria from the engine's factories, the processed distribution at a logical prefix
    (stateful processors replayed along it), and the exact law P."""

    # What replay's caches keep (`_Lru`): processors replayed along a prefix (a guidance processor holds the
    # unconditional model's cache, about 0.4 MB on SmolLM2), the last ones D2 checked, to go on from
    # (`expected_element`), and score vectors (logits and D2's expected scores with their incoming ones)
    REPLAYED_KEPT, CHECKED_KEPT, SCORES_KEPT_BYTES = 4096, 64, 256 << 20

    def __init__(self, cfg: TransformersConfig, arm: str = "on", patches: Sequence[str] | None = ()):
        """`arm` and `patches` (the frozen repairs its engine ran with; None: not known) are the traced
        arm's: a request traced at level calls is re-run as it ran (`rerun`)."""
        self.cfg: TransformersConfig | None = cfg
        self.h: Harness | None = Harness(cfg, speculative=False)
        speculation: Callable[[], dict[str, Any]] | str = dict
        if arm.startswith("on") or arm == "repaired":
            speculation = (lambda: prompt_lookup_kwargs(cfg)) if cfg.drafter["method"] == "prompt_lookup" else \
                functools.cache(lambda: draft_model_kwargs(cfg))  # the assistant is loaded at the first re-run
        if patches is None:
            speculation = "the trace header does not name the frozen repair its arm ran with"
        self._start(self.h.model, self.h.prompt, self.h.call_kwargs, speculation, patches or ())

    @classmethod
    def of_program(cls, model: Any, prompt: list[int], call_kwargs: Callable[[], dict[str, Any]],
                   speculation: Callable[[], dict[str, Any]] | str) -> Kernel:
        """The kernel of one request of a program badc never saw: its model, prompt and generate()
        keywords (`call_kwargs` makes them fresh, stateful processors included, without the drafter's),
        no campaign config; `speculation` gives the drafter's keywords ({} for none), or says why the
        request cannot be re-run."""
        kernel = cls.__new__(cls)
        kernel.cfg = kernel.h = None
        kernel._start(model, prompt, call_kwargs, speculation, ())
        return kernel

    def _start(self, model: Any, prompt: list[int], call_kwargs: Callable[[], dict[str, Any]],
               speculation: Callable[[], dict[str, Any]] | str, patches: Sequence[str]) -> None:
        import torch

        self.model, self.prompt, self.call_kwargs = model, [int(t) for t in prompt], call_kwargs
        self.speculation, self.patches = speculation, tuple(patches)
        self.input_ids = torch.tensor([self.prompt])
        self._logits = _Lru(math.inf, self.SCORES_KEPT_BYTES, lambda k, v: v.numel() * v.element_size())
        self._replayed = _Lru(self.REPLAYED_KEPT)  # (index, ids) -> element `index` ready for its call at ids
        # element `index` after D2's call at `ids` on its recorded scores: called along ids, so ready for the
        # next row's call (the check is that row's step too)
        self._checked = _Lru(self.CHECKED_KEPT)
        self._expected = _Lru(math.inf, self.SCORES_KEPT_BYTES, _scores_bytes)
        self._stops: dict[tuple[int, ...], bool] = {}
        self._pristine: tuple[Any, Any] | None = None  # the first fresh pair, never called
        self._copyable = True

    def for_request(self, request: dict[str, Any]) -> Kernel:
        """The kernel that checks `request` (a campaign's requests share their config's)."""
        return self

    def fresh(self) -> tuple[Any, Any]:
        """(LogitsProcessorList, StoppingCriteriaList) exactly as generate() prepares them for this
        configuration, captured before decoding starts: a copy of the first capture (a capture runs
        generate()'s preparation, about 15 times a copy's time), or a new capture where copying cannot
        give a fresh pair (native state, or a criterion that reads the clock when it is made)."""
        if self._pristine is not None:
            try:
                return copy.deepcopy(self._pristine, {id(self.model): self.model})
            except Exception:
                self._pristine, self._copyable = None, False
        pair = self._capture()
        # MaxTimeCriteria's clock starts when it is made: a copy would carry the first one's
        if self._copyable and not any(hasattr(c, "initial_timestamp") for c in pair[1]):
            try:
                self._pristine = copy.deepcopy(pair, {id(self.model): self.model})
            except Exception:
                self._copyable = False
        return pair

    def _capture(self) -> tuple[Any, Any]:
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
            model.generate(self.input_ids, **self.call_kwargs())
        except _Captured as c:
            return c.processors, c.stopping
        finally:
            del model._get_logits_processor, model._get_stopping_criteria
        raise RuntimeError(f"{f'config {self.cfg.id}' if self.cfg else 'program'}: generate() did not build its "
                           "processors")

    def logits(self, ids: list[int] | tuple[int, ...]) -> Any:
        import torch

        key = tuple(ids)
        hit = self._logits.get(key)
        if hit is None:
            with torch.no_grad():
                hit = self._logits.put(key, self.model(torch.tensor([key])).logits[0, -1].float())
        return hit.clone()

    def replayed(self, index: int, ids: list[int] | tuple[int, ...]) -> Any:
        """A fresh element `index` of the processor list (-1: the whole list), called along the
        prefixes prompt .. ids[:-1] as sequential decoding would (placeholder zero scores: the
        registered stateful processors' state ignores scores), ready for its call at `ids`."""
        import torch

        ids = tuple(ids)
        # the longest prefix already replayed: one step from the previous row's, not the whole prefix again
        # (a guidance processor's step is a forward of the unconditional model)
        start, proc = len(self.prompt), None
        for t in range(len(ids), len(self.prompt), -1):
            hit = self._replayed.get((index, ids[:t]))
            if hit is None:
                hit = self._checked.get((index, ids[:t - 1]))
            if hit is None:
                continue
            try:
                proc, start = copy.deepcopy(hit, {id(self.model): self.model}), t
            except Exception:  # a processor holding native state: replay it again
                pass
            break
        if start == len(ids) and proc is not None:  # replayed to `ids` itself (a prompt alone starts fresh)
            return proc
        if proc is None:
            procs, _ = self.fresh()
            proc = procs if index < 0 else procs[index]
        zeros = torch.zeros((1, self.model.config.vocab_size))
        with torch.no_grad():  # a processor's tensors must be graph leaves to be copied
            for t in range(start, len(ids)):
                proc(torch.tensor([list(ids[:t])]), zeros.clone())
        try:
            self._replayed.put((index, ids), copy.deepcopy(proc, {id(self.model): self.model}))
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
                hit = self._expected.put(key, proc(torch.tensor([list(ids)]), incoming)[0].float().numpy())
            # the call on recorded scores leaves the state the placeholder call would (the registered stateful
            # processors' state ignores scores): `replayed` goes on from it, a guidance forward saved per row
            self._checked.put((index, tuple(ids)), proc)
        return hit

    def rerun(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The processor records (scores included) of the request whose `records` these are, re-run with
        speculation as it was traced and its draws scripted to its path (rerun.py); NotPortable where it
        cannot be re-run."""
        from badc_replay.engines.transformers.rerun import rerun_records
        from badc_replay.repairs import load_intervention
        from badc_trace.portable import NotPortable

        if isinstance(self.speculation, str):
            raise NotPortable(self.speculation)
        undos = [load_intervention(rid).apply(self.model) for rid in self.patches]
        try:
            return rerun_records(self.model, self.input_ids, {**self.call_kwargs(), **self.speculation()}, records)
        finally:
            for undo in reversed(undos):
                if callable(undo):
                    undo()

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

        def run(choose: Choose) -> str:
            def multinomial(probs: Any, num_samples: int = 1, *a: Any, **k: Any) -> Any:
                row = probs.reshape(-1, probs.shape[-1])[0].double().numpy()
                return torch.tensor([[choose(row / row.sum())]])

            return self.h.scripted(multinomial)

        return enumerate_law(run, what=f"config {self.cfg.id}")
