"""A toy speculative-decoding engine in pure numpy, shipped with badc as the engine protocol's worked
example (docs/engines/toy.md) and as a fast, exact engine for badc's own tests.

It has what the real engines have, small: a seeded bigram model, logits processors (stateless and
stateful), stopping criteria, a prompt-lookup drafter, sample-and-match verification (lossless when
every read is logical), and returned log-probabilities. Four defects can be planted, one per contract
class of the paper, each a read that speculation makes easy to get wrong:

- D1: processors at verification row i see the whole evaluation buffer (committed + every draft)
  instead of the row's logical prefix (committed + drafts before row i);
- D2: a stateful processor is one object for the request, advanced by every verification row and
  never rolled back, instead of a state equal to a fresh one replayed along the row's prefix;
- D3: stopping is evaluated only at the end of each verification block, so tokens past a stop the
  sequential engine would have honoured are returned;
- D4: the returned log-probability of an accepted draft token is the one of the buffer's last row
  instead of its own row.

A fifth, R1, is planted in the speculative arm's sampler instead of the engine's reads: each uniform
serves two draws, so the draws are not independent. The engine's scripted law (the exact channel's mu)
stays equal to P; only its sampled arm departs, which is what testing the sampled arm against mu
localizes (docs/statistics.md, "Exact channel").
"""

from badc_toy.engine import DEFECTS, EOS, VOCAB, ToyEngine, ToyModel, make_processor, make_stop

__all__ = ["DEFECTS", "EOS", "VOCAB", "ToyEngine", "ToyModel", "make_processor", "make_stop"]
