"""Standalone reproducers of the llama-cpp-python defects badc found, for upstream bug reports.

Needs only llama-cpp-python and what it installs (numpy): no badc, no download. The model is badc's
embedded `tiny` GGUF (a random one-layer llama, vocabulary <unk> <s> </s> a-g, float32, seed 3), written
here byte for byte; the prompt `abcdabcdab`, `max_tokens=4`, `temperature=1.0` and create_completion's
other defaults, a seed per request, and `LlamaPromptLookupDecoding(num_pred_tokens=4, max_ngram_size=2)`
as the speculative decoder.

    python repro.py control              # plain sampling: the same output per seed with and without it
    python repro.py processor-prefix     # processors are given unverified draft tokens (D1)
    python repro.py min-tokens           # MinTokensLogitsProcessor(3) under prompt lookup: EOS too early
    python repro.py stop-recheck         # the stopping re-check after the loop reads draft tokens (D3)
    python repro.py logit-bias           # logit_bias with logits_processor: neither is applied
    python repro.py processor-exception  # an exception raised in a processor never reaches the caller
    python repro.py all [--draws N]      # each of the above (N seeded requests per arm, default 20,000)
    python repro.py check                # quick: each defect still shows, and the D1 fix removes it

Each case prints what one request did, then (where the output law is affected) runs N seeded requests with
and without prompt lookup on the same seeds. With plain sampling the engine returns the same output for a
seed either way (`control`), so each request whose output differs is evidence, and outputs sequential
decoding cannot return are counted.
Each ends with a line `SHOWN: ...` or `NOT SHOWN: ...`; the exit status is 1 if any case did not show
its defect (the report has gone stale), 0 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

VOCAB = ["<unk>", "<s>", "</s>", "a", "b", "c", "d", "e", "f", "g"]
EOS = 2
PROMPT = "abcdabcdab"
MAX_TOKENS = 4
DRAFTER = {"num_pred_tokens": 4, "max_ngram_size": 2}
N_EMBD, N_FF, N_HEAD, N_CTX = 16, 32, 2, 256


# -- the model: badc's `tiny` GGUF, written without the gguf package ---------------------------------


def _weights(seed: int) -> list[tuple[str, np.ndarray]]:
    shapes = [  # (rows, cols) as PyTorch orders them; GGUF stores the dimensions reversed
        ("token_embd.weight", (len(VOCAB), N_EMBD)), ("blk.0.attn_norm.weight", (N_EMBD,)),
        ("blk.0.attn_q.weight", (N_EMBD, N_EMBD)), ("blk.0.attn_k.weight", (N_EMBD, N_EMBD)),
        ("blk.0.attn_v.weight", (N_EMBD, N_EMBD)), ("blk.0.attn_output.weight", (N_EMBD, N_EMBD)),
        ("blk.0.ffn_norm.weight", (N_EMBD,)), ("blk.0.ffn_gate.weight", (N_FF, N_EMBD)),
        ("blk.0.ffn_up.weight", (N_FF, N_EMBD)), ("blk.0.ffn_down.weight", (N_EMBD, N_FF)),
        ("output_norm.weight", (N_EMBD,)), ("output.weight", (len(VOCAB), N_EMBD))]
    out = []
    for i, (name, shape) in enumerate(shapes):  # norms are ones; matrices N(0, 0.2^2) from PCG64 streams
        w = np.ones(shape, np.float32) if len(shape) == 1 else \
            (np.random.Generator(np.random.PCG64([seed, i])).standard_normal(shape) * 0.2).astype(np.float32)
        out.append((name, w))
    return out


def write_model(path: Path, seed: int = 3) -> None:
    """GGUF v3, float32, 32-byte alignment: the layout gguf-py's GGUFWriter gives badc's model."""
    def s(v: str) -> bytes:
        return struct.pack("<Q", len(v.encode())) + v.encode()

    def kv(key: str, kind: int, payload: bytes) -> bytes:
        return s(key) + struct.pack("<I", kind) + payload

    def u32(key: str, v: int) -> bytes:
        return kv(key, 4, struct.pack("<I", v))

    def array(key: str, kind: int, items: list[bytes]) -> bytes:
        return kv(key, 9, struct.pack("<IQ", kind, len(items)) + b"".join(items))

    keys = [
        kv("general.architecture", 8, s("llama")), kv("general.name", 8, s(f"badc-tiny-{seed}")),
        u32("llama.context_length", N_CTX), u32("llama.embedding_length", N_EMBD), u32("llama.block_count", 1),
        u32("llama.feed_forward_length", N_FF), u32("llama.attention.head_count", N_HEAD),
        u32("llama.attention.head_count_kv", N_HEAD), u32("llama.rope.dimension_count", N_EMBD // N_HEAD),
        kv("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)), u32("general.file_type", 0),
        u32("llama.vocab_size", len(VOCAB)), kv("tokenizer.ggml.model", 8, s("llama")),
        array("tokenizer.ggml.tokens", 8, [s(t) for t in VOCAB]),
        array("tokenizer.ggml.scores", 6, [struct.pack("<f", 0.0)] * len(VOCAB)),
        array("tokenizer.ggml.token_type", 5, [struct.pack("<i", t) for t in [2, 3, 3] + [1] * (len(VOCAB) - 3)]),
        u32("tokenizer.ggml.unknown_token_id", 0), u32("tokenizer.ggml.bos_token_id", 1),
        u32("tokenizer.ggml.eos_token_id", EOS), kv("tokenizer.ggml.add_bos_token", 7, b"\0"),
        kv("tokenizer.ggml.add_space_prefix", 7, b"\0")]
    weights = _weights(seed)
    infos, data = [], b""
    for name, w in weights:
        infos.append(s(name) + struct.pack("<I", w.ndim) + b"".join(struct.pack("<Q", d) for d in w.shape[::-1])
                     + struct.pack("<IQ", 0, len(data)))
        data += w.tobytes() + b"\0" * (-w.nbytes % 32)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(weights), len(keys)) + b"".join(keys) + b"".join(infos)
    path.write_bytes(head + b"\0" * (-len(head) % 32) + data)


# -- requests ----------------------------------------------------------------------------------------


def load(model: Path, speculative: bool):
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    draft = LlamaPromptLookupDecoding(**DRAFTER) if speculative else None
    llm = Llama(model_path=str(model), n_ctx=N_CTX, n_threads=1, n_threads_batch=1, verbose=False, seed=0,
                draft_model=draft)
    # The returned text drops the control tokens <unk> and <s>, which this model can sample: keep the ids
    # generate() yields instead (the returned ones are the first usage.completion_tokens of them).
    generate, llm.yielded = llm.generate, []

    def tracked(*args, **kwargs):
        llm.yielded = []
        for token in generate(*args, **kwargs):
            llm.yielded.append(int(token))
            yield token
    llm.generate = tracked
    return llm


def prompt(llm) -> list[int]:
    return llm.tokenize(PROMPT.encode(), add_bos=False, special=False)


def complete(llm, seed: int, **kw) -> tuple[list[int], str]:
    """One seeded request: the returned token ids and finish_reason."""
    out = llm.create_completion(prompt(llm), max_tokens=MAX_TOKENS, seed=seed, temperature=1.0, **kw)
    return llm.yielded[: out["usage"]["completion_tokens"]], out["choices"][0]["finish_reason"]


def text(ids) -> str:
    return "".join(VOCAB[i] for i in ids)


def describe(ids, finish: str) -> str:
    return f"{text(ids)!r} ({finish})"


def fix_logical_prefix(llm) -> None:
    """badc's frozen repair llama_cpp/logical-prefix (llama.py.diff in the report) made at run time on one
    instance: sample() records the sampled index, and each processor gets input_ids[: idx + 1]."""
    from llama_cpp.llama import LogitsProcessorList

    init_sampler, sample = llm._init_sampler, llm.sample

    def _init_sampler(*args, **kwargs):
        procs = kwargs.get("logits_processor")
        if procs is not None:
            kwargs["logits_processor"] = LogitsProcessorList(
                [lambda ids, scores, p=p: p(llm.input_ids[: llm._sample_idx + 1], scores) for p in procs])
        return init_sampler(*args, **kwargs)

    def _sample(*args, **kwargs):
        idx = kwargs.get("idx")
        llm._sample_idx = idx if idx is not None else llm.n_tokens - 1
        return sample(*args, **kwargs)

    llm._init_sampler, llm.sample = _init_sampler, _sample


def fix_recheck(llm) -> None:
    """A proposed fix of the stopping re-check (not a badc frozen repair), made at run time on one instance:
    when generate() is left, the ids past the last committed position are dropped from the evaluation
    buffer (and the KV cache), as `generate()` could do itself on `return` and on GeneratorExit at its yield."""
    generate = llm.generate

    def cropped(tokens, *args, **kwargs):
        finished = False
        try:
            yield from generate(tokens, *args, **kwargs)
            finished = True  # a stopping criterion ended it: every yielded id was evaluated
        finally:  # abandoned at a yield: that last id was sampled, not evaluated
            committed = len(tokens) + len(llm.yielded) - (0 if finished or not llm.yielded else 1)
            if llm.n_tokens > committed:
                llm.n_tokens = committed
                llm._ctx.kv_cache_seq_rm(-1, committed, -1)
    llm.generate = cropped


Outcome = tuple[tuple[int, ...], str]  # (returned ids, finish_reason)


def arm(model: Path, speculative: bool, seeds: range, fix: Callable | None = None, **kw) -> list[Outcome]:
    """The outcome of each seeded request; `kw` may hold factories of fresh processors or stopping criteria."""
    from llama_cpp.llama import LogitsProcessorList, StoppingCriteriaList

    llm = load(model, speculative)
    if fix is not None:
        fix(llm)
    out = []
    for seed in seeds:
        args = {}
        if "processors" in kw:
            args["logits_processor"] = LogitsProcessorList(kw["processors"]())
        if "stopping" in kw:
            args["stopping_criteria"] = StoppingCriteriaList(kw["stopping"]())
        ids, finish = complete(llm, seed, **args, **kw.get("extra", {}))
        out.append((tuple(ids), finish))
    return out


def compare(on: list[Outcome], off: list[Outcome], fixed: list[Outcome] | None = None) -> None:
    """Both arms run the same seeds. This engine couples them: with plain sampling, a seed returns the same
    output with and without prompt lookup (`control`), so every request whose outputs differ is evidence."""
    p, q = collections.Counter(on), collections.Counter(off)
    print(f"\n{len(on):,} seeded requests per arm, the same seeds with and without prompt lookup:")
    print(f"  requests whose output differs: {sum(a != b for a, b in zip(on, off, strict=True)):,}"
          + (f" (with the fix: {sum(a != b for a, b in zip(fixed, off, strict=True)):,})" if fixed is not None else ""))
    top = sorted(set(p) | set(q), key=lambda y: (-(p[y] + q[y]), y))[:6]
    print("  most frequent outputs (off / on): " + ", ".join(f"{describe(*y)} {q[y]}/{p[y]}" for y in top))


def verdict(shown: bool, what: str) -> bool:
    print(f"{'SHOWN' if shown else 'NOT SHOWN'}: {what}\n")
    return shown


def control(model: Path, draws: int) -> bool:
    print("## control: plain sampling is coupled draw for draw\n")
    on, off = arm(model, True, range(draws)), arm(model, False, range(draws))
    differ = sum(a != b for a, b in zip(on, off, strict=True))
    print(f"{draws:,} seeded requests, plain sampling (temperature 1.0): the output differs with and without prompt "
          f"lookup in {differ:,}; prompt lookup was used (prompt 'abcdabcdab' has 2-gram matches at every step).")
    return verdict(differ == 0, "the same output for the same seed with and without prompt lookup (not a defect: "
                   "the reference for the cases below)")


# -- 1. processors are given unverified draft tokens (D1) --------------------------------------------


class Recorder:
    """A logits processor that changes nothing and keeps the ids it is given at each call."""

    def __init__(self):
        self.seen: list[list[int]] = []

    def __call__(self, input_ids, scores):
        self.seen.append([int(i) for i in input_ids])
        return scores


def prefix_mismatches(model: Path, seeds: range, fixed: bool = False, show: bool = False) -> int:
    """Requests in which some processor call was not given its logical prefix. Call j samples the j-th
    token generate() yields (EOS included), so its logical prefix is the prompt and the j tokens before it."""
    from llama_cpp.llama import LogitsProcessorList

    llm = load(model, True)
    if fixed:
        fix_logical_prefix(llm)
    bad = 0
    for seed in seeds:
        rec = Recorder()
        ids, finish = complete(llm, seed, logits_processor=LogitsProcessorList([rec]))
        logical = [prompt(llm) + llm.yielded[:j] for j in range(len(rec.seen))]
        if any(seen != want for seen, want in zip(rec.seen, logical, strict=True)):
            bad += 1
            if show and bad == 1:
                print(f"seed {seed}, prompt lookup: returned {text(ids)!r} ({finish}); the processor was called "
                      f"{len(rec.seen)} times:")
                for j, (seen, want) in enumerate(zip(rec.seen, logical, strict=True)):
                    extra = f"   <- {len(seen) - len(want)} ids past its logical prefix: " \
                            f"{text(seen[len(want):])!r}" if seen != want else ""
                    print(f"  call {j} (samples returned token {j}): given {text(seen)!r} ({len(seen)} ids), "
                          f"logical prefix {text(want)!r} ({len(want)} ids){extra}")
    return bad


def processor_prefix(model: Path, draws: int) -> bool:
    print("## processor-prefix: processors are given the evaluation buffer, with unverified drafts (D1)\n")
    n = min(draws, 2000)
    bad = prefix_mismatches(model, range(n), show=True)
    fixed = prefix_mismatches(model, range(n), fixed=True)
    print(f"\nRequests in which a processor call was given ids past its logical prefix, of {n:,} with prompt "
          f"lookup: {bad:,}; with the fix (llama.py.diff) applied at run time: {fixed:,}.")
    return verdict(bad > 0 and fixed == 0, "processors given unverified drafts; none with the fix")


# -- 2. MinTokensLogitsProcessor under prompt lookup ---------------------------------------------------


def min_tokens(model: Path, draws: int) -> bool:
    from llama_cpp.llama import MinTokensLogitsProcessor

    print("## min-tokens: MinTokensLogitsProcessor(3, eos) counts drafts as generated tokens (D1)\n")
    procs = {"processors": lambda: [MinTokensLogitsProcessor(3, EOS)]}
    on, off = arm(model, True, range(draws), **procs), arm(model, False, range(draws), **procs)
    fix = arm(model, True, range(draws), fix_logical_prefix, **procs)
    compare(on, off, fix)

    def early(outcomes):  # EOS before 3 tokens: the processor masks EOS there; sequential decoding cannot
        return sum(finish == "stop" and len(ids) < 3 for ids, finish in outcomes)
    print(f"  outputs ended by EOS before 3 tokens (impossible with min_tokens=3): speculation off {early(off):,}, "
          f"on {early(on):,}, on with the fix {early(fix):,} (of {draws:,})")
    return verdict(early(on) > 0 and early(off) == 0 and early(fix) == 0,
                   "EOS released early with prompt lookup only; not with the fix")


# -- 3. the stopping re-check after the loop (D3) ------------------------------------------------------


class LastId:
    """A stopping criterion: stop when the last id is `token` ('d'); keeps the ids of each call."""

    def __init__(self, token: int = 6):
        self.token, self.seen = token, []

    def __call__(self, input_ids, logits) -> bool:
        self.seen.append([int(i) for i in input_ids])
        return len(input_ids) > 0 and int(input_ids[-1]) == self.token


def stop_recheck(model: Path, draws: int) -> bool:
    from llama_cpp.llama import StoppingCriteriaList

    print("## stop-recheck: the stopping re-check after the generation loop reads unverified drafts (D3)\n")
    llm = load(model, True)
    for seed in range(draws):
        crit = LastId()
        ids, finish = complete(llm, seed, stopping_criteria=StoppingCriteriaList([crit]))
        if finish == "length" and len(ids) < MAX_TOKENS:
            committed = prompt(llm) + ids  # generate() returned: every yielded id was evaluated
            off = describe(*complete(load(model, False), seed, stopping_criteria=StoppingCriteriaList([LastId()])))
            print(f"seed {seed}, prompt lookup, stopping criterion 'last id is d': returned {text(ids)!r} with "
                  f"finish_reason 'length' after {len(ids)} of max_tokens={MAX_TOKENS} tokens. The criterion was "
                  f"called {len(crit.seen)} times. Inside generate() it saw {text(crit.seen[-2])!r}, ending in 'd', "
                  "and generation stopped; the re-check after the loop, which sets finish_reason 'stop', was "
                  f"given {text(crit.seen[-1])!r} ({len(crit.seen[-1])} ids): {len(crit.seen[-1]) - len(committed)} "
                  f"unverified drafts past the committed {text(committed)!r}, so it did not fire. Without prompt "
                  f"lookup the same seed returns {off}.")
            break
    stops = {"stopping": lambda: [LastId()]}
    on, off = arm(model, True, range(draws), **stops), arm(model, False, range(draws), **stops)
    fix = arm(model, True, range(draws), fix_recheck, **stops)
    compare(on, off, fix)

    def witness(outcomes):  # stopped by the criterion but reported 'length': sequential decoding says 'stop'
        return sum(finish == "length" and len(ids) < MAX_TOKENS for ids, finish in outcomes)
    print(f"  outputs shorter than max_tokens with finish_reason 'length' (sequential decoding reports 'stop' "
          f"there): speculation off {witness(off):,}, on {witness(on):,}, on with the proposed fix {witness(fix):,} "
          f"(of {draws:,})")
    return verdict(witness(on) > 0 and witness(off) == 0 and witness(fix) == 0 and fix == off,
                   "the re-check read drafts with prompt lookup only; not with the proposed fix")


# -- 4. logit_bias with logits_processor ---------------------------------------------------------------


def logit_bias(model: Path, draws: int) -> bool:
    print("## logit-bias: logit_bias together with logits_processor applies neither (no speculation needed)\n")
    n = min(draws, 2000)
    calls = []

    def counting():
        rec = Recorder()
        calls.append(rec)
        return [rec]

    bias = {"extra": {"logit_bias": {9: -100.0}}}  # token 9 is 'g'
    both = arm(model, False, range(n), processors=counting, **bias)
    alone = arm(model, False, range(n), **bias)

    def with_g(outcomes):
        return sum(9 in ids for ids, _ in outcomes)
    n_calls = sum(len(r.seen) for r in calls)
    print(f"create_completion(..., logit_bias={{9: -100}}, logits_processor=[a counting processor]) over {n:,} "
          f"seeded requests: the processor was called {n_calls} times, and 'g' appears in {with_g(both):,} "
          f"outputs; with logit_bias alone, in {with_g(alone):,}. _create_completion runs "
          "`logits_processor = logits_processor.extend(_logit_bias_processor)`, and list.extend returns None.")
    return verdict(n_calls == 0 and with_g(both) > 0 and with_g(alone) == 0,
                   "the user's processor and the bias both dropped")


# -- 5. an exception raised in a processor -------------------------------------------------------------


def processor_exception(model: Path, draws: int) -> bool:
    from llama_cpp.llama import LogitsProcessorList

    print("## processor-exception: an exception raised in a logits processor never reaches the caller\n")
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append

    def failing(input_ids, scores):
        raise ValueError("this processor always fails")
    try:
        llm = load(model, False)
        ids, finish = complete(llm, 0, logits_processor=LogitsProcessorList([failing]))
        raised = None
    except ValueError as e:
        raised = e
    finally:
        sys.unraisablehook = hook
    if raised is None:
        print(f"create_completion with a processor that raises ValueError returned {text(ids)!r} "
              f"(finish_reason {finish!r}); the {len(unraisable)} exceptions went to sys.unraisablehook "
              f"({unraisable[0].err_msg if unraisable else '-'}): the C callback cannot propagate them, and "
              "every token was sampled from scores the processor never changed.")
    else:
        print(f"create_completion raised {raised!r} to the caller")
    return verdict(raised is None and len(unraisable) > 0, "the processor's exception swallowed")


CASES: dict[str, Callable[[Path, int], bool]] = {
    "control": control, "processor-prefix": processor_prefix, "min-tokens": min_tokens, "stop-recheck": stop_recheck,
    "logit-bias": logit_bias, "processor-exception": processor_exception}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", choices=[*CASES, "all", "check"])
    ap.add_argument("--draws", type=int, default=20000, help="seeded requests per arm (default 20,000)")
    ap.add_argument("--model", type=Path, help="write the GGUF model here (default: a temporary file)")
    args = ap.parse_args()
    import llama_cpp

    draws = 2000 if args.case == "check" else args.draws  # check: enough for every case to show, ~1 minute
    print(f"llama-cpp-python {llama_cpp.__version__}, numpy {np.__version__}\n")
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or Path(tmp) / "tiny-3.gguf"
        write_model(model)
        shown = [fn(model, draws) for name, fn in CASES.items() if args.case in (name, "all", "check")]
    return 0 if all(shown) else 1


if __name__ == "__main__":
    sys.exit(main())
