"""The paper's controlled comparison RQ3 (issue 27, item 3) at the scale this machine allows.

Per fresh-model campaign K (a tiny-model seed and a period-4 prompt of its own, for both engines): the
two causes of the paper's Table 5, each through two feature families, each family as a directed
configuration (the paper's settings) and a randomly generated one (its parameters, the drafter's and
the sampling's, drawn from fixed ranges by a fixed seed), plus three negative controls, m = 11:

- stateful processors (`transformers/stateful-replay`, transformers 5.17.0): guidance (H-D2-cfg,
  priority 1) and SynthID (H-D2-synthid, priority 2);
- the processor buffer (`llama_cpp/logical-prefix`, llama-cpp-python 0.3.36): minimum length
  (H-D1-phys, priority 1) and prefix parity (H-D1-phys, priority 2).

Directed and random configurations are the `stratum`s "directed" and "random", so stage S3 confirms
each cause once per stratum. Every config with a hypothesis is also decided on the same draws without
A_H and its complement (report.json's `without_hypothesis_events`), and S3 also confirms what that cell
selects (`confirm_without_hypothesis_events`; confirm_m = 8); from campaign 2 on, S3's unrepaired arm
stops at its first planned look that recurs (`confirm_anytime`). `analyze` reads each report:
a cause is recovered in a cell (stratum x with/without A_H) when the repair is confirmed for its
highest-priority detected (eligible, calibrated, compatible) config; d_A = directed - random recovered
causes with A_H, d_B = with - without, per campaign; family detections by BADC and by the comparator C
(Table 5b). A cell whose selected config has no confirmation (a job that failed, a build barred by
a VOID config) is UNDETERMINED, never counted.

    .venv/bin/python tools/rq3.py write [--campaigns 10]          # campaigns/rq3/campaign-K.toml
    .venv/bin/python tools/rq3.py run K [--draws N --confirm N]   # badc run --anytime, resumable
    .venv/bin/python tools/rq3.py analyze                          # findings/rq3/result.md
(`--out DIR` for both: another parent folder, e.g. for a smaller trial run.)
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

from scipy.stats import beta

ROOT = Path(__file__).resolve().parent.parent
CAMPAIGNS = ROOT / "campaigns" / "rq3"
OUT = ROOT / "findings" / "rq3"
SEED = 2027  # the generator's: model seeds, prompts and the random configurations
LETTERS = "abcdef"  # in both engines' tiny vocabularies
# stage S3 with looks: its unrepaired arm stops at the first look that recurs (about 2 of a guidance
# confirmation's 6 core-hours); campaign 1 was sealed before S3 had looks and keeps the fixed-n rule
S3_LOOKS = ("confirm_draws = 400000", "confirm_anytime = true")
SYNTHID_KEYS = [654, 400, 836, 123, 340, 443, 597, 160]
CAUSES = {"transformers/stateful-replay": ("guidance", "synthid"),  # in priority order
          "llama_cpp/logical-prefix": ("min_tokens", "parity")}
FAMILIES = {"guidance": "transformers/stateful-replay", "synthid": "transformers/stateful-replay",
            "min_tokens": "llama_cpp/logical-prefix", "parity": "llama_cpp/logical-prefix"}
HF = 'engine = "transformers"\nbuild = "5.17.0"\nmax_new_tokens = 3\n'
LCP = 'engine = "llama_cpp"\nbuild = "0.3.36"\nmax_new_tokens = 4\nsampling = { temperature = 1.0 }\n'


def _prompt(rng: random.Random) -> str:
    cycle = rng.sample(LETTERS, 4)
    return "".join(cycle[i % 4] for i in range(10))


def _hf_drafter(rng: random.Random | None) -> str:
    n, g = (3, 2) if rng is None else (rng.choice([2, 3, 4]), rng.choice([1, 2, 3]))
    return f'drafter = {{ method = "prompt_lookup", num_tokens = {n}, max_ngram_size = {g} }}\n'


def _lcp_drafter(rng: random.Random | None) -> str:
    n, g = (4, 2) if rng is None else (rng.choice([2, 3, 4, 5]), rng.choice([1, 2, 3]))
    return f'drafter = {{ method = "prompt_lookup", num_pred_tokens = {n}, max_ngram_size = {g} }}\n'


def family_config(family: str, rng: random.Random | None) -> str:
    """A family's keys: the paper's directed settings (rng None) or randomly drawn ones."""
    if family == "guidance":
        scale = 1.5 if rng is None else rng.choice([1.2, 1.5, 2.0, 3.0])
        return (HF + _hf_drafter(rng) + f"generation = {{ guidance_scale = {scale} }}\n"
                'hypothesis = "H-D2-cfg"\nrepair = "transformers/stateful-replay"\npriority = 1\n')
    if family == "synthid":
        keys = SYNTHID_KEYS if rng is None else rng.sample(range(100, 1000), 8)
        ngram = 2 if rng is None else rng.choice([2, 3])
        return (HF + _hf_drafter(rng) + f'generation = {{ watermarking_config = {{ type = "synthid", keys = {keys}, '
                f"ngram_len = {ngram} }} }}\n"
                'hypothesis = "H-D2-synthid"\nrepair = "transformers/stateful-replay"\npriority = 2\n')
    if family == "min_tokens":
        k = 3 if rng is None else rng.choice([2, 3, 4])
        return (LCP + _lcp_drafter(rng) + f'processors = [{{ name = "min_tokens", min_tokens = {k} }}]\n'
                'hypothesis = "H-D1-phys"\nrepair = "llama_cpp/logical-prefix"\npriority = 1\n')
    if family == "parity":
        return (LCP + _lcp_drafter(rng) + 'processors = [{ name = "parity" }]\npredicates = ["allowed_tokens"]\n'
                'hypothesis = "H-D1-phys"\nrepair = "llama_cpp/logical-prefix"\npriority = 2\n')
    raise ValueError(family)


def write(campaigns: int) -> None:
    rng = random.Random(SEED)
    CAMPAIGNS.mkdir(parents=True, exist_ok=True)
    for k in range(1, campaigns + 1):
        seed, prompt = 100 + k, _prompt(rng)
        lines = [f"# Generated by tools/rq3.py (seed {SEED}); do not edit: rerun `tools/rq3.py write`.",
                 f"# RQ3 campaign {k}: fresh tiny models (seed {seed}) and prompt {prompt!r}; m = 11.",
                 "[campaign]", f'name = "rq3-{k}"', "draws = 200000", f"seed = {SEED + k}", "anytime = true",
                 "confirm_without_hypothesis_events = true", *(S3_LOOKS if k > 1 else ()), "",
                 "[defaults]", f'model = "tiny:{seed}"', f'prompt = "{prompt}"', ""]
        for fam in FAMILIES:
            for stratum in ("directed", "random"):
                lines += ["[[config]]", f'id = "RQ3-{k}-{fam.upper()}-{stratum[0].upper()}"',
                          f'stratum = "{stratum}"',
                          family_config(fam, None if stratum == "directed" else rng).rstrip(), ""]
        lines += ["[[config]]", f'id = "RQ3-{k}-HF-N"', 'role = "negative-control"', (HF + _hf_drafter(None)).rstrip(),
                  "", "[[config]]", f'id = "RQ3-{k}-LCP-N"', 'role = "negative-control"',
                  (LCP + _lcp_drafter(None)).rstrip(), "", "[[config]]", f'id = "RQ3-{k}-LCP-N0"',
                  'role = "negative-control"', 'api = "generate"', (LCP + _lcp_drafter(None)).rstrip(), ""]
        (CAMPAIGNS / f"campaign-{k}.toml").write_text("\n".join(lines))
    print(f"wrote {campaigns} campaigns in {CAMPAIGNS}")


def run(k: int, draws: int | None, confirm: int, workers: int, out: Path = OUT) -> int:
    from badc_check.campaign import load_campaign

    needed = load_campaign(CAMPAIGNS / f"campaign-{k}.toml", confirm_draws=confirm).confirm_draws_needed
    if needed:  # every confirmation would fail on the witness bound: each cell would read "no" for nothing
        raise SystemExit(f"rq3: --confirm {confirm:,} cannot confirm any repair at this campaign's budget; at least "
                         f"{needed:,} can, and a gap bound needs more (Table 2's guidance confirmation bounded its "
                         "gap by 0.0065 with 400,000)")
    cmd = [str(ROOT / ".venv" / "bin" / "badc"), "run", str(CAMPAIGNS / f"campaign-{k}.toml"), "--anytime",
           "--confirm", str(confirm), "--out", str(out / f"campaign-{k}"), "--workers", str(workers)]
    rc = subprocess.run(cmd + (["--draws", str(draws)] if draws else [])).returncode
    return 0 if rc in (0, 1, 3) else rc  # 1 (a FAILS) and 3 (something unchecked) are results here


def _qualifies(c: dict, without: bool) -> bool:
    """Detected with eligible evidence, calibrated and compatible: stage S3's rule, on one cell's decision."""
    w = c.get("without_hypothesis_events") if without else c
    compatible = c.get("hypothesis") is None or c["hypothesis"]["compatible"]
    return (w is not None and w["decision"] == "FAILS" and w["eligible"] and c["calibration"]["passed"] is True
            and compatible)


def _family(cid: str) -> str | None:
    return next((f for f in FAMILIES if f"-{f.upper()}-" in cid), None)


def cell(report: dict, stratum: str, repair: str, without: bool) -> str:
    """Whether the cause is recovered in a cell: "yes", "no" or "undetermined" (the config the cell
    selects has no confirmation result)."""
    tag = stratum[0].upper()
    members = [c for c in report["configs"] if c["id"].endswith(f"-{tag}") and _family(c["id"]) in CAUSES[repair]]
    members.sort(key=lambda c: CAUSES[repair].index(_family(c["id"])))  # the sealed priority: 1, then 2
    chosen = next((c for c in members if _qualifies(c, without)), None)
    if chosen is None:
        return "no"
    rep = chosen.get("repair") or {}
    if rep.get("attempted") is False or "confirmed" not in rep:
        return "undetermined" if without else "no"  # with A_H, S3 itself gave it no attempt (a VOID build)
    return "yes" if rep["confirmed"] else "no"


def cp_upper(k: int, n: int, alpha: float = 0.05) -> float:
    """The exact (Clopper-Pearson) one-sided upper bound on a probability, k of n: the paper's bound on
    P(d_A != 0), 0.26-0.39 for 0 or 1 of 10."""
    return 1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k))


def _cost(folder: Path) -> str:
    """A campaign's worker core-hours from its shards (tools/core_hours.py): elapsed, and CPU where recorded."""
    shards = [json.loads(f.read_text()) for f in folder.glob("shards/*/*.json")]
    if not shards:
        return "-"
    elapsed = sum(s["elapsed_s"] for s in shards) / 3600
    timed = [s for s in shards if s.get("cpu_s") is not None]
    cpu = f", CPU {sum(s['cpu_s'] for s in timed) / 3600:.1f}" + ("" if len(timed) == len(shards) else
                                                                     f" ({len(timed)} of {len(shards)} shards)")
    return f"elapsed {elapsed:.1f}" + (cpu if timed else "")


def analyze(out: Path = OUT) -> str:
    reports = sorted(out.glob("campaign-*/report.json"))
    if not reports:
        raise SystemExit(f"no finished campaign in {out}: run `tools/rq3.py run K` first")
    rows, d_a, d_b = [], [], {"directed": [], "random": []}
    detect = {(f, s, w): 0 for f in FAMILIES for s in ("directed", "random") for w in ("with", "without", "C")}
    for path in reports:
        r = json.loads(path.read_text())
        if r.get("pending"):  # a pending config's cell would read as not recovered: never count it so
            raise SystemExit(f"{path}: {len(r['pending'])} configs are pending (the campaign did not finish): "
                             f"resume it with `tools/rq3.py run {path.parent.name.removeprefix('campaign-')}`")
        rec = {(s, w): [cell(r, s, rep, w == "without") for rep in CAUSES] for s in ("directed", "random")
               for w in ("with", "without")}
        rows.append((r["campaign"], rec, _cost(path.parent)))
        count = {key: (None if "undetermined" in v else v.count("yes")) for key, v in rec.items()}
        if None not in (count["directed", "with"], count["random", "with"]):
            d_a.append(count["directed", "with"] - count["random", "with"])
        for s in ("directed", "random"):
            if None not in (count[s, "with"], count[s, "without"]):
                d_b[s].append(count[s, "with"] - count[s, "without"])
        for c in r["configs"]:
            fam = _family(c["id"])
            if fam is None:
                continue
            s = "directed" if c["id"].endswith("-D") else "random"
            detect[fam, s, "with"] += c["decision"] == "FAILS"
            detect[fam, s, "without"] += (c.get("without_hypothesis_events") or {}).get("decision") == "FAILS"
            detect[fam, s, "C"] += bool((c.get("comparator") or {}).get("rejected"))
    n = len(rows)
    lines = [f"# RQ3 at this machine's scale: {n} campaign(s) (the paper: 10)", "",
             "| campaign | directed, with A_H | directed, without | random, with A_H | random, without | "
             "worker core-hours |", "|---|---|---|---|---|---|"]
    for name, rec, cost in rows:
        lines.append(f"| {name} | " + " | ".join(", ".join(rec[s, w]) for s in ("directed", "random")
                                                for w in ("with", "without")) + f" | {cost} |")
    nz = sum(x != 0 for x in d_a)
    lines += ["", f"d_A (directed - random recovered causes, with A_H): determined in {len(d_a)} of {n}, nonzero in "
              f"{nz}; exact 95% upper bound on P(d_A != 0): {cp_upper(nz, len(d_a)):.2f}" if d_a else
              "d_A: determined in no campaign"]
    for s, xs in d_b.items():
        nz = sum(x != 0 for x in xs)
        lines.append(f"d_B ({s}: with - without A_H): determined in {len(xs)} of {n}, nonzero in {nz}"
                     + (f"; exact 95% upper bound on P(d_B != 0): {cp_upper(nz, len(xs)):.2f}" if xs else ""))
    lines += ["", "| family | directed with A_H | directed without | directed C | random with A_H | random without | "
              "random C |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {f} | " + " | ".join(str(detect[f, s, w]) for s in ("directed", "random")
                                       for w in ("with", "without", "C")) + " |" for f in FAMILIES]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    w = sub.add_parser("write")
    w.add_argument("--campaigns", type=int, default=10)
    r = sub.add_parser("run")
    r.add_argument("k", type=int)
    r.add_argument("--draws", type=int, help="draws per arm (default: the campaign's 200,000)")
    r.add_argument("--confirm", type=int, default=400000)
    r.add_argument("--workers", type=int, default=2)
    a = sub.add_parser("analyze")
    for p in (r, a):
        p.add_argument("--out", type=Path, default=OUT, help=f"campaign folders' parent (default {OUT})")
    args = ap.parse_args(argv)
    if args.what == "write":
        write(args.campaigns)
    elif args.what == "run":
        return run(args.k, args.draws, args.confirm, args.workers, args.out)
    else:
        text = analyze(args.out)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "result.md").write_text(text)
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
