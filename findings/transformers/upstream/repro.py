"""Standalone reproducers of the transformers defects badc found, for upstream bug reports.

Needs only numpy, torch, transformers and tokenizers (and xgrammar 0.2.8 for `xgrammar`): no badc, no download.
The model is a random one-layer Llama with a 7-token vocabulary (a-f, </s>) built from a seed (badc's
`tiny`), the
prompt `abcdabcdab`, `max_new_tokens=3`, `do_sample=True`, and prompt lookup
(`prompt_lookup_num_tokens=3`, `max_matching_ngram_size=2`) as the speculative decoder.

    python repro.py guidance      # guidance_scale=1.5: processor state advanced by drafts
    python repro.py synthid       # the SynthID watermark: the same
    python repro.py synthid-draft-model  # the same with a draft model as the drafter
    python repro.py stop-string   # stop_strings=["cd"] completed inside a verification block
    python repro.py xgrammar      # xgrammar's HF processor with prompt lookup: AssertionError
    python repro.py all [--draws N]
    python repro.py check         # quick: each report still shows here (exit 1 if one does not), with the repair

Each prints what one generate() call did, then compares speculation on and off over N seeded draws
(default 4,000) per arm, with a second speculation-off run as the noise reference; each arm has its
own seeds. Speculative decoding is meant to leave the output law unchanged.
"""

from __future__ import annotations

import argparse
import collections
import copy
import sys
import traceback

import numpy as np
import torch
import transformers
from transformers.generation import logits_process as lp
from transformers.generation import stopping_criteria as sc

VOCAB = ["a", "b", "c", "d", "e", "f", "</s>"]
EOS = 6
PROMPT = "abcdabcdab"
SPECULATION = {"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 2}
SYNTHID = {"keys": [654, 400, 836, 123, 340, 443, 597, 160], "ngram_len": 2}


def build(seed: int = 7) -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerFast]:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one token per character
    tok.decoder = decoders.Fuse()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="</s>")
    config = transformers.LlamaConfig(
        vocab_size=len(VOCAB), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, eos_token_id=EOS, pad_token_id=EOS, bos_token_id=None,
        tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config)
    state = {}  # the same weights as badc's `tiny` model: numpy PCG64 streams over a fixed order
    for i, (name, tensor) in enumerate(sorted(model.state_dict().items())):
        if name.endswith("norm.weight"):
            state[name] = torch.ones_like(tensor)
        elif tensor.dim() == 2:
            rng = np.random.Generator(np.random.PCG64([seed, i]))
            state[name] = torch.from_numpy((rng.standard_normal(tuple(tensor.shape)) * 0.2).astype(np.float32))
        else:
            state[name] = tensor
    model.load_state_dict(state)
    model.generation_config = transformers.GenerationConfig(eos_token_id=EOS, pad_token_id=EOS)
    return model.eval(), tokenizer


class Run:
    def __init__(self, generation: dict, processors=None, speculation: dict | None = None):
        self.model, self.tok = build()
        self.speculation = SPECULATION if speculation is None else speculation
        self.ids = self.tok(PROMPT, return_tensors="pt").input_ids
        self.generation = {"max_new_tokens": 3, "do_sample": True, **generation}
        self.processors = processors  # a function returning a fresh LogitsProcessorList, or None

    def generate(self, seed: int, speculative: bool, tokenizer: bool = False) -> list[int]:
        torch.manual_seed(seed)
        kw = dict(self.generation, **(self.speculation if speculative else {}))
        if self.processors:
            kw["logits_processor"] = self.processors(self)
        if tokenizer:
            kw["tokenizer"] = self.tok
        with torch.no_grad():
            out = self.model.generate(self.ids, **kw)
        return out[0, self.ids.shape[1]:].tolist()

    def text(self, ids: list[int]) -> str:
        return "".join(VOCAB[i] for i in ids)


def outcome(run: Run, seed: int, speculative: bool, tokenizer: bool = False) -> str:
    try:
        return run.text(run.generate(seed, speculative, tokenizer))
    except Exception as e:  # noqa: BLE001 - a crash is an outcome of the law
        return f"crash:{type(e).__name__}"


def compare(run: Run, draws: int, tokenizer: bool = False, witness=None) -> None:
    """Speculation on and off, and off again as the noise reference, each on its own seeds (so the
    arms are independent samples, as the chi-square test assumes)."""
    off = collections.Counter(outcome(run, s, False, tokenizer) for s in range(draws))
    ref = collections.Counter(outcome(run, s, False, tokenizer) for s in range(draws, 2 * draws))
    on = collections.Counter(outcome(run, s, True, tokenizer) for s in range(2 * draws, 3 * draws))

    def tv(p, q):
        return 0.5 * sum(abs(p[y] - q[y]) for y in set(p) | set(q)) / draws

    print(f"\n{draws:,} draws per arm, transformers {transformers.__version__}, torch {torch.__version__}:")
    print(f"  total variation, speculation on vs off:                {tv(on, off):.4f}")
    print(f"  total variation, off vs off (noise reference):         {tv(ref, off):.4f}")
    try:
        from scipy.stats import chi2_contingency

        keys = sorted(set(on) | set(off))  # +0.5 keeps outputs seen in one arm only; sparse cells make p rough
        p = chi2_contingency([[on[k] + 0.5 for k in keys], [off[k] + 0.5 for k in keys]]).pvalue
        print(f"  chi-square test of equal laws, on vs off: p = {p:.2e}")
    except ImportError:
        pass
    top = sorted(set(on) | set(off), key=lambda y: -(on[y] + off[y]))[:6]
    print("  most frequent outputs (off / on): " + ", ".join(f"{y!r} {off[y]}/{on[y]}" for y in top))
    for name, arm in (("off", off), ("on", on)):
        crashes = sum(k for y, k in arm.items() if y.startswith("crash:"))
        if crashes:
            print(f"  crashes with speculation {name}: {crashes:,} of {draws:,}")
    if witness is not None:
        for name, arm in (("off", off), ("on", on)):
            n = sum(k for y, k in arm.items() if witness(y))
            print(f"  outputs sequential decoding cannot return, speculation {name}: {n:,} of {draws:,}")


# -- stateful processors: guidance and SynthID ------------------------------------------------------


def fresh_copy(proc):
    """The processor as it was before its first call (its state is a dict or None then)."""
    c = copy.copy(proc)
    if hasattr(proc, "unconditional_context"):
        c.unconditional_context = dict(proc.unconditional_context)
    return c


def trace_stateful(run: Run, cls: type, seed: int) -> tuple[list[int], list[tuple[list[int], bool, float | None]]]:
    """One speculative generate(): every call of the processor, and what a fresh processor stepped
    sequentially along the same ids (the schedule of speculation-off decoding) returns for it. Returns
    the new tokens and, per call, (new ids it was given, placeholder scores?, max score difference)."""
    original = cls.__call__
    calls = []
    prompt_len = run.ids.shape[1]

    def logged(self, input_ids, scores):
        if not hasattr(self, "_initial"):
            self._initial = fresh_copy(self)
        expected = None
        if not bool((scores == scores[0, 0]).all()):  # a row that will be sampled, not a placeholder
            fresh = fresh_copy(self._initial)
            for t in range(prompt_len, input_ids.shape[1]):
                original(fresh, input_ids[:, :t], torch.zeros_like(scores))
            expected = original(fresh, input_ids, scores.clone())
        seen = original(self, input_ids, scores)
        calls.append((input_ids[0, prompt_len:].tolist(), expected is None,
                      None if expected is None else float((expected - seen).abs().max())))
        return seen

    cls.__call__ = logged
    try:
        new = run.generate(seed, True)
    finally:
        cls.__call__ = original
    tokens = f"{len(new)} new token{'s' * (len(new) != 1)}"
    print(f"transformers {transformers.__version__}: one generate() with prompt lookup, seed {seed}, returned "
          f"{run.text(new)!r} ({tokens}); {cls.__name__} was called {len(calls)} times "
          f"(sequential decoding calls it once per new token: {len(new)}):")
    for i, (ids, placeholder, diff) in enumerate(calls):
        role = "placeholder scores (candidate filtering)" if placeholder else \
            f"sampled row; max |scores - fresh processor stepped sequentially| = {diff:.4f}"
        print(f"  call {i:2d}: new ids so far {run.text(ids)!r:8} {role}")
    print("Every call updates the processor's state with the last id it is given; nothing rolls it back when a "
          "call was a placeholder or its row is rejected, so the rows that are sampled see a state sequential "
          "decoding never reaches.")
    return new, calls


def guidance(draws: int) -> None:
    run = Run({"guidance_scale": 1.5})
    trace_stateful(run, lp.UnbatchedClassifierFreeGuidanceLogitsProcessor, seed=0)
    compare(run, draws)


def synthid(draws: int) -> None:
    run = Run({"watermarking_config": transformers.SynthIDTextWatermarkingConfig(**SYNTHID)})
    trace_stateful(run, lp.SynthIDTextWatermarkLogitsProcessor, seed=0)
    compare(run, draws)


def synthid_draft_model(draws: int) -> None:
    """The same watermark with a draft model (badc's `tiny:11`) instead of prompt lookup: the
    assistant's generate() runs the same processor list, and its calls advance the same state."""
    run = Run({"watermarking_config": transformers.SynthIDTextWatermarkingConfig(**SYNTHID)},
              speculation={"assistant_model": build(11)[0]})
    print(f"transformers {transformers.__version__}: SynthID with assistant_model (tiny:11) as the drafter")
    compare(run, draws)


# -- a stop string completed inside a verification block ---------------------------------------------


def stop_string(draws: int) -> None:
    run = Run({"stop_strings": ["cd"]})

    def early(text: str) -> bool:  # "cd" before the output's end: sequential decoding stops right after it
        return not text.startswith("crash:") and "cd" in text[:-1] and not text.endswith("cd")

    original = sc.StopStringCriteria.__call__
    lengths = []

    def logged(self, input_ids, scores, **kw):
        lengths.append(input_ids.shape[1] - run.ids.shape[1])
        return original(self, input_ids, scores, **kw)

    for seed in range(draws):
        lengths.clear()
        sc.StopStringCriteria.__call__ = logged
        try:
            text = run.text(run.generate(seed, True, tokenizer=True))
        finally:
            sc.StopStringCriteria.__call__ = original
        if early(text):
            at = text.index("cd") + 2
            print(f"transformers {transformers.__version__}: seed {seed}, prompt lookup, stop_strings=['cd']: returned "
                  f"{text!r}. The stop string is complete after {at} new tokens, but StopStringCriteria was evaluated "
                  f"only at {lengths} new tokens, after each verification block; it looks at the end of the "
                  f"sequence, so it did not see 'cd' and generation went on. Without prompt lookup the same seed "
                  f"returns {run.text(run.generate(seed, False, tokenizer=True))!r}.")
            break
    compare(run, draws, tokenizer=True, witness=early)


# -- xgrammar --------------------------------------------------------------------------------------


def xgrammar(draws: int) -> None:
    import xgrammar as xgr
    from xgrammar.contrib.hf import LogitsProcessor

    run = Run({})
    info = xgr.TokenizerInfo.from_huggingface(run.tok, vocab_size=len(VOCAB))
    grammar = xgr.GrammarCompiler(info).compile_grammar('root ::= [a-c]+ "d"?')
    run.processors = lambda r: transformers.LogitsProcessorList([LogitsProcessor(grammar)])  # fresh each call
    for seed in range(draws):
        try:
            run.generate(seed, True)
        except Exception as e:  # noqa: BLE001
            frame = traceback.extract_tb(e.__traceback__)[-1]
            print(f"transformers {transformers.__version__}, xgrammar: seed {seed}, prompt lookup, a fresh xgrammar "
                  f"LogitsProcessor for the call: {type(e).__name__} at "
                  f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}\n"
                  f"    {frame.line}")
            break
    compare(run, min(draws, 1000))


# -- check: each report still shows on this build (run by badc's suite) ----------------------------


def fix_stateful(cls: type):
    """The change of badc's frozen repair transformers/stateful-replay, made at run time on a class: each
    call rebuilds the processor's state from the prompt along the prefix it is given, so calls on
    placeholder scores and on rejected rows leave nothing behind. Returns the original __call__."""
    original = cls.__call__

    def rebuilt(self, input_ids, scores):
        if not hasattr(self, "_fix_initial"):
            self._fix_initial, self._fix_prompt = fresh_copy(self), input_ids.shape[1]
        fresh = fresh_copy(self._fix_initial)
        for t in range(self._fix_prompt, input_ids.shape[1]):
            original(fresh, input_ids[:, :t], torch.zeros_like(scores))
        return original(fresh, input_ids, scores)

    cls.__call__ = rebuilt
    return original


def verdict(state: str, what: str) -> str:
    print(f"{state}: {what}\n")
    return state


def check(draws: int) -> list[str]:
    """Quick and seeded: the mechanism of each report on one generate() (and with the frozen repair where
    there is one), the stop-string seed of report 2, and the first xgrammar crash of report 3."""
    out = []
    _, calls = trace_stateful(Run({"temperature": 0.7}), lp.TemperatureLogitsWarper, seed=0)
    out.append(verdict("SHOWN" if all(d == 0 for _, placeholder, d in calls if not placeholder) else "NOT SHOWN",
                       "control: a stateless processor's sampled rows equal the sequential schedule's"))
    stateful = (("guidance", {"guidance_scale": 1.5}, lp.UnbatchedClassifierFreeGuidanceLogitsProcessor),
                ("SynthID", {"watermarking_config": transformers.SynthIDTextWatermarkingConfig(**SYNTHID)},
                 lp.SynthIDTextWatermarkLogitsProcessor))
    for name, generation, cls in stateful:
        _, calls = trace_stateful(Run(generation), cls, seed=0)
        shown = any(d > 1e-3 for _, placeholder, d in calls if not placeholder)
        original = fix_stateful(cls)
        try:
            print(f"With transformers/stateful-replay's change applied at run time to {cls.__name__}:")
            _, calls = trace_stateful(Run(generation), cls, seed=0)
        finally:
            cls.__call__ = original
        fixed = all(d == 0 for _, placeholder, d in calls if not placeholder)
        out.append(verdict("SHOWN" if shown and fixed else "NOT SHOWN",
                           f"{name}: a sampled row differs from the sequential schedule's; none with the repair"))
    run = Run({"stop_strings": ["cd"]})
    on, off = run.text(run.generate(1062, True, tokenizer=True)), run.text(run.generate(1062, False, tokenizer=True))
    print(f"stop_strings=['cd'], seed 1062: {on!r} with prompt lookup, {off!r} without it")
    out.append(verdict("SHOWN" if "cd" in on[:-1] and not on.endswith("cd") and off.endswith("cd") else "NOT SHOWN",
                       "stop string: generation went on past a completed stop string with prompt lookup only"))
    try:
        import xgrammar  # noqa: F401
    except ImportError:
        out.append(verdict("NOT CHECKED", "xgrammar: xgrammar is not installed"))
        return out
    crashes = collections.Counter()

    def count(seed: int, speculative: bool) -> None:
        crashes[speculative] += outcome(run, seed, speculative).startswith("crash:AssertionError")
    run = Run({})
    from xgrammar.contrib.hf import LogitsProcessor

    info = xgrammar.TokenizerInfo.from_huggingface(run.tok, vocab_size=len(VOCAB))
    grammar = xgrammar.GrammarCompiler(info).compile_grammar('root ::= [a-c]+ "d"?')
    run.processors = lambda r: transformers.LogitsProcessorList([LogitsProcessor(grammar)])
    for seed in range(50):
        count(seed, True)
        count(seed, False)
    print(f"xgrammar, 50 seeds: AssertionError in {crashes[True]} with prompt lookup, {crashes[False]} without it")
    out.append(verdict("SHOWN" if crashes[True] > 0 and crashes[False] == 0 else "NOT SHOWN",
                       "xgrammar: the HF processor asserts with prompt lookup only"))
    return out


CASES = {"guidance": guidance, "synthid": synthid, "synthid-draft-model": synthid_draft_model,
         "stop-string": stop_string, "xgrammar": xgrammar}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=[*CASES, "all", "check"])
    ap.add_argument("--draws", type=int, default=4000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.case == "check":  # exit 1: a report no longer shows (stale); 3: a case could not be checked here
        states = check(args.draws)
        return 1 if "NOT SHOWN" in states else 3 if "NOT CHECKED" in states else 0
    for name, fn in CASES.items():
        if args.case in (name, "all"):
            print(f"## {name}\n")
            fn(args.draws)
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
