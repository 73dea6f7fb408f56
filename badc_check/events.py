"""The event family of channel S, fixed before any draw and closed under complement.

Base events (paper §4.2-4.3): one singleton per outcome in the support of P and of every registered
hypothesis law, OTHER (crash-free outcomes outside those singletons), token prefixes of length 1
and 2, output lengths, termination codes, crash, the contract-violation event (the union of the
outcomes that violate a registered predicate), and A_H = {y : mu_H(y) > P(y)} per hypothesis. The family
is the base events and their complements. Every event is a set of returned outputs, so D lower-bounds
the total-variation distance between the arms' returned-output laws; what trace replay finds about
calls is the contract channel, never an event here.

Prefix, length and termination events contain crash-free outcomes only, so that crashes, which
stay outcomes, are counted in the crash event, in crash singletons and in complements. For E4
eligibility an event is *crash-free* when it contains none of the crash outcomes observed in either
arm; choosing that subset after the draws is sound because the bounds hold simultaneously over the
whole family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from badc_trace.outcomes import Outcome, parse_outcome

Law = Mapping[str, float]
# How a model without an exact law gets its family (sealed with the campaign, applied to the pilot's
# outcomes before any decision draw): singletons and prefixes that are frequent in the pilot, every length
# and termination code it returned.
PILOT_SHARE = 0.01  # an outcome or prefix is frequent at this share of the pilot
PILOT_SINGLETONS = 64  # at most this many singletons (the most frequent), so B stays small
PILOT_RULE = (f"singletons: crash-free outcomes of pilot share >= {PILOT_SHARE} (the {PILOT_SINGLETONS} most "
              f"frequent); prefixes of length 1 and 2 of share >= {PILOT_SHARE}; every length up to the longest "
              "and every termination code of the pilot")
Violates = Callable[[str], bool]  # does a returned outcome violate some registered predicate?


def _never(y: str) -> bool:
    return False


@dataclass(frozen=True)
class Event:
    id: str
    kind: str  # singleton | other | prefix | length | code | crash | violation | hypothesis
    complement: bool = False


class EventFamily:
    """Events over outcome strings, with vectorised counting and probabilities."""

    def __init__(self, singletons: Iterable[str], prefixes: Iterable[tuple[int, ...]], lengths: Iterable[int],
                 codes: Iterable[str], hypothesis_sets: Mapping[str, frozenset[str]] | None = None,
                 source: str = "reference", violates: Violates | None = None):
        self.source = source
        self._violates = violates or _never
        base: list[Event] = []
        self._singleton: dict[str, int] = {}
        for y in sorted(set(singletons), key=_outcome_order):
            self._singleton[y] = len(base)
            base.append(Event(f"y={y}", "singleton"))
        self._other = len(base)
        base.append(Event("OTHER", "other"))
        self._prefix: dict[tuple[int, ...], int] = {}
        for p in sorted(set(prefixes), key=lambda t: (len(t), t)):
            self._prefix[p] = len(base)
            base.append(Event("prefix=" + " ".join(map(str, p)), "prefix"))
        self._length: dict[int, int] = {}
        for n in sorted(set(lengths)):
            self._length[n] = len(base)
            base.append(Event(f"len={n}", "length"))
        self._code: dict[str, int] = {}
        for c in sorted(set(codes)):
            self._code[c] = len(base)
            base.append(Event(f"code={c}", "code"))
        self._crash = len(base)
        base.append(Event("crash", "crash"))
        self._violation = len(base)
        base.append(Event("contract-violation", "violation"))
        self._hyp: list[tuple[int, frozenset[str]]] = []
        for hid, members in (hypothesis_sets or {}).items():
            self._hyp.append((len(base), frozenset(members)))
            base.append(Event(f"A_H({hid})", "hypothesis"))
        self.base = base
        self.events = base + [Event(f"not {e.id}", e.kind, complement=True) for e in base]
        self.index = {e.id: i for i, e in enumerate(self.events)}

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def build(cls, reference: Law | None, hypotheses: Mapping[str, Law] | None = None,
              declared: Iterable[str] | None = None, violates: Violates | None = None,
              hypothesis_events: bool = True) -> EventFamily:
        """The family for a configuration, from P, the registered hypothesis laws and predicates
        (`violates(y)`: does outcome y violate one of them; the contract-violation event is its set).
        `hypothesis_events=False` withholds each A_H (and so its complement) while its support's
        singletons stay, as the paper's RQ3 cells and its post hoc check do.

        Without a reference the singletons come from `declared` outcomes (fixed in advance);
        `source` records which, so reports can say how the family was fixed.
        """
        hypotheses = dict(hypotheses or {})
        supports: set[str] = set()
        if reference is not None:
            supports |= {y for y, p in reference.items() if p > 0}
            source = "reference"
        elif declared is not None:
            supports |= set(declared)
            source = "declared"
        else:
            source = "empty"
        for law in hypotheses.values():
            supports |= {y for y, p in law.items() if p > 0}
        outs = [parse_outcome(y) for y in supports]
        ok = [o for o in outs if not o.crash]
        prefixes = {o.tokens[:k] for o in ok for k in (1, 2) if len(o.tokens) >= k}
        max_len = max((len(o.tokens) for o in ok), default=0)
        codes = {o.code for o in ok}
        ref = reference or {}
        hsets = {hid: frozenset(y for y, p in law.items() if p > ref.get(y, 0.0))
                 for hid, law in hypotheses.items()} if hypothesis_events else {}
        return cls(supports, prefixes, range(max_len + 1), codes, hsets, source, violates)

    @classmethod
    def from_pilot(cls, pilot: Mapping[str, int], violates: Violates | None = None) -> EventFamily:
        """The family of a config without P, frozen from its sealed pilot's outcome counts (PILOT_RULE).
        Every event is still a set of returned outputs, fixed before the decision draws."""
        n = sum(pilot.values())
        ok = {y: k for y, k in pilot.items() if k and not parse_outcome(y).crash}
        least = max(1.0, PILOT_SHARE * n)
        frequent = sorted((y for y, k in ok.items() if k >= least), key=lambda y: (-ok[y], _outcome_order(y)))
        prefix_counts: dict[tuple[int, ...], int] = {}
        for y, k in ok.items():
            toks = parse_outcome(y).tokens
            for j in (1, 2):
                if len(toks) >= j:
                    prefix_counts[toks[:j]] = prefix_counts.get(toks[:j], 0) + k
        outs = [parse_outcome(y) for y in ok]
        return cls(frequent[:PILOT_SINGLETONS], [p for p, k in prefix_counts.items() if k >= least],
                   range(max((len(o.tokens) for o in outs), default=0) + 1), {o.code for o in outs},
                   source="pilot", violates=violates)

    # -- membership --------------------------------------------------------------------------
    def _members(self, y: str, o: Outcome) -> list[int]:
        idx = []
        s = self._singleton.get(y)
        if s is not None:
            idx.append(s)
        if o.crash:
            idx.append(self._crash)
        else:
            if s is None:
                idx.append(self._other)
            for k in (1, 2):
                if len(o.tokens) >= k and (p := self._prefix.get(o.tokens[:k])) is not None:
                    idx.append(p)
            if (n := self._length.get(len(o.tokens))) is not None:
                idx.append(n)
            if (c := self._code.get(o.code)) is not None:
                idx.append(c)
        if self._violates(y):
            idx.append(self._violation)
        idx.extend(i for i, members in self._hyp if y in members)
        return idx

    def _accumulate(self, weights: Mapping[str, float]) -> np.ndarray:
        rows, vals = [], []
        for y, w in weights.items():
            if w:
                for i in self._members(y, parse_outcome(y)):
                    rows.append(i)
                    vals.append(w)
        out = np.zeros(len(self.base))
        np.add.at(out, np.asarray(rows, dtype=np.int64), np.asarray(vals, dtype=np.float64))
        return out

    def crash_free(self, *arms: Mapping[str, int]) -> np.ndarray:
        """Mask of the events that contain none of the crash outcomes observed in `arms`."""
        crashes = {y for arm in arms for y, k in arm.items() if k and parse_outcome(y).crash}
        inside = np.zeros(len(self.base), dtype=bool)  # base event holds some observed crash
        outside = np.zeros(len(self.base), dtype=bool)  # some observed crash lies outside it
        for y in crashes:
            hit = np.zeros(len(self.base), dtype=bool)
            hit[self._members(y, parse_outcome(y))] = True
            inside |= hit
            outside |= ~hit
        return ~np.concatenate([inside, outside])

    def membership(self, outcomes: list[str]) -> Any:
        """0/1 sparse matrix (outcomes x base events, `scipy.sparse.csr_array`), for counting many count
        vectors at once (`counts @ membership`). Sparse: an outcome lies in a handful of events, and a
        family with a singleton per outcome of a large support (vLLM's 54,000) would be gigabytes dense."""
        from scipy.sparse import csr_array

        rows, cols = [], []
        for r, y in enumerate(outcomes):
            members = sorted(set(self._members(y, parse_outcome(y))))
            rows += [r] * len(members)
            cols += members
        return csr_array((np.ones(len(rows), dtype=np.int64), (rows, cols)), shape=(len(outcomes), len(self.base)))

    def counts(self, outcomes: Mapping[str, int]) -> np.ndarray:
        """Counts of every event (base events, then complements) among `n` draws."""
        base = self._accumulate(outcomes)
        n = sum(outcomes.values())
        return np.concatenate([base, n - base])

    def probabilities(self, law: Law) -> np.ndarray:
        """The probability of every event under an exact law."""
        base = self._accumulate(law)
        total = float(sum(law.values()))
        return np.concatenate([base, total - base])

    def __len__(self) -> int:
        return len(self.events)

    @property
    def bounds_per_config(self) -> int:
        """B for channel S: a lower bound on the on-arm and an upper bound on the off-arm per event.

        The calibration bound L_off(A) = 1 - U_off(not A) is one of these by complement closure.
        """
        return 2 * len(self.events)


def _outcome_order(y: str) -> tuple:
    o = parse_outcome(y)
    return (len(o.tokens), o.tokens, o.code)
