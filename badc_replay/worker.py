"""Campaign worker: runs under an engine build's interpreter and does one job of a campaign.

    python -m badc_replay.worker CONFIG.json [CONFIG.json ...] --laws --out DIR [--seed SEED --count N]
        exact laws of each configuration in turn: P, the registered hypothesis law, the simulator check
        -> DIR/laws/ID.json; for a model that cannot be enumerated (a checkpoint, a path), the sealed
        pilot instead: N speculation-off draws on their own seeds (arm `off-pilot`), from whose outcomes
        the campaign freezes the event family before any decision draw
    python -m badc_replay.worker CONFIG.json [CONFIG.json ...] --exact --out DIR [--soundness N]
            [--witness N --tol T --seed SEED]
        the exact channel of each configuration in turn: P, mu (the live speculation-on engine with only
        its random draws scripted), the repaired arm's mu and each registered hypothesis's law
        -> DIR/exact/ID.json (badc_check/exact.py compares them); where TV(mu, P) > T, the first
        max(200, 3 / TV) on-arm draws (N at most) traced and replayed -> DIR/exact/ID.badc (the first
        call that broke the contract)
    python -m badc_replay.worker CONFIGS.json --validate
        engine-native keywords of a list of configs, judged by the installed engine (before a campaign
        is sealed) -> stdout: JSON {config id: [problem, ...]}
    python -m badc_replay.worker CONFIG.json --arm ARM --start S --count N --seed SEED --out DIR
        draws S .. S+N-1 of one arm (off, on, repaired, off-confirm, on-confirm), probed and traced,
        the trace replayed against the contract -> DIR/shards/ID/ARM-S.json, DIR/traces/ID/ARM-S.badc
    python -m badc_replay.worker CONFIG.json --arm ARM --chain S:N,S:N,... [--stop FILE] ...
        those shards in turn, with one engine start (badc run --anytime's looks), none begun once
        FILE exists

Every result file is written atomically (temporary file, then rename), so a killed worker leaves
either a whole shard or none: the runner re-runs missing shards with the same seeds (each draw's seed
is a function of the campaign seed, the config, the arm and the draw's index), and no draw is counted
twice or lost. A re-run shard goes on from its last checkpoint (`TRACE.resume`, every 30 s; see
badc_replay/arms.py), so a kill costs at most that much of each shard in flight; the shard's
`resumed` field says how many draws it took over. Progress goes to stderr as `progress ARM DONE/TOTAL
START` (`resumed ARM DONE/TOTAL START` for the draws taken over), START naming the shard, and
`exact ID SECONDS` as each config's exact channel is written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from badc_replay.arms import collect
from badc_replay.engine import ConfigError, Engine
from badc_replay.exact import NOT_ENUMERABLE, ExactUnavailable, tv
from badc_replay.provenance import code_digest
from badc_replay.registry import UnknownEngineError, get_engine
from badc_replay.results import ExactResult, Hypothesis, LawsResult, Pilot, ShardResult, to_json
from badc_trace.files import write_json
from badc_trace.instrument import LEVELS

ARMS = ("off", "on", "repaired", "off-confirm", "on-confirm")
PILOT_ARM = "off-pilot"  # speculation off, seeds of their own: never a draw of a decision arm




def engine_of(config: dict[str, Any]) -> Engine:
    try:
        return get_engine(config["engine"])
    except UnknownEngineError as e:
        raise NotImplementedError(str(e)) from None


def validate(configs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each config's problems that only the installed engine can judge (`Engine.check_native`), and its
    refusal with speculation on, if any (`Engine.refusal`): {id: {"problems": [...], "refused": str | None}}."""
    out = {}
    for config in configs:
        engine = engine_of(config)
        try:
            cfg = engine.parse_config(config)
            problems = model_problems(cfg) + engine.check_native(cfg)
            out[config["id"]] = {"problems": problems, "refused": None if problems else engine.refusal(cfg)}
        except ConfigError as e:
            out[config["id"]] = {"problems": e.problems, "refused": None}
    return out


def model_problems(cfg: Any) -> list[str]:
    """A checkpoint whose package is missing from this build's environment, or a path that is not there."""
    from badc_trace.checkpoints import ModelSpecError, enumerable, resolve_model

    spec = getattr(cfg, "model", "tiny")
    try:
        if not enumerable(spec):
            resolve_model(spec)
    except ModelSpecError as e:
        return [f"key 'model': {e}"]
    return []


def laws(config: dict[str, Any], out: Path, *, seed: int = 0, pilot: int = 0, progress: Any = None) -> dict[str, Any]:
    engine = engine_of(config)
    cfg = engine.parse_config(config)
    t = time.monotonic()
    if not engine.enumerable(cfg):
        if pilot <= 0:
            raise ValueError(f"config {cfg.id}: model {cfg.model!r} has no exact law; its pilot needs --count > 0")
        res = collect(engine, cfg, PILOT_ARM, pilot, seed, level="counts", progress=progress)
        laws = LawsResult(id=cfg.id, build=engine.version(), reference=None, paths=0,
                          elapsed_s=round(time.monotonic() - t, 2), support=len(res.outcomes),
                          pilot=Pilot(draws=pilot, arm=PILOT_ARM, outcomes=res.outcomes), code=code_digest())
        write_json(out / "laws" / f"{cfg.id}.json", to_json(laws))
        return to_json(laws)
    ref = engine.reference_law(cfg)
    hyp = hypothesis = check = None
    if config.get("hypothesis"):
        hyp = config["hypothesis"]
        hypothesis = Hypothesis(id=hyp, law=engine.hypothesis_law(cfg, hyp).law)
        check = engine.simulator_check(cfg)
    res = LawsResult(id=cfg.id, build=engine.version(), reference=ref.law, paths=ref.paths,
                     elapsed_s=round(time.monotonic() - t, 2),
                     support=len(set(ref.law) | set(hypothesis["law"] if hypothesis else ())), hypothesis=hypothesis,
                     simulator_check=check.value if check else None, simulator_metric=check.metric if check else None,
                     code=code_digest())
    write_json(out / "laws" / f"{cfg.id}.json", to_json(res))
    return to_json(res)


def exact(config: dict[str, Any], out: Path, *, soundness: int = 0, witness: int = 0, tol: float | None = None,
          seed: int = 0, seal: str = "") -> dict[str, Any]:
    """The exact channel's laws of one config (ExactResult), written to DIR/exact/ID.json; where TV(mu, P)
    exceeds `tol` (and the soundness pass found nothing), also the first max(WITNESS_FLOOR, 3 / TV) on-arm
    draws, `witness` at most, seeded as the campaign's, traced to DIR/exact/ID.badc and replayed: the first
    call that broke the contract."""
    engine = engine_of(config)
    cfg = engine.parse_config(config)
    seconds: dict[str, float] = {}

    def timed(part: str, f: Callable[[], Any]) -> Any:
        t = time.monotonic()
        try:
            return f()
        finally:
            seconds[part] = round(time.monotonic() - t, 3)

    applied = list(config.get("applied", ()))
    res: dict[str, Any] = {"id": cfg.id, "build": engine.version(), "status": None, "reason": None,
                           "reference": None, "on": None, "paths": 0, "proposed": 0, "soundness": None,
                           "mirrored": None, "repaired": None, "repaired_status": None, "hypotheses": {},
                           "texts": {}, "seconds": seconds, "code": code_digest()}
    try:
        if not engine.enumerable(cfg):
            raise ExactUnavailable(NOT_ENUMERABLE, f"model {cfg.model!r} is not an embedded tiny model: its laws "
                                                   "have too many paths to enumerate")
        # mu first: an engine or path that cannot be scripted says so before P is computed
        mu = timed("on", lambda: engine.speculative_law(cfg, applied, soundness))
        res["reference"] = timed("reference", lambda: engine.reference_law(cfg)).law
        res.update(on=mu.law, paths=mu.paths, proposed=mu.proposed, mirrored=mu.mirrored,
                   soundness={"leaves": mu.soundness.leaves, "mismatches": mu.soundness.mismatches,
                              "rule": mu.soundness.rule})
    except ExactUnavailable as e:
        res.update(status=e.status, reason=e.reason)
    if res["on"] is not None:
        if config.get("repair"):
            try:
                res["repaired"] = timed("repaired", lambda: engine.speculative_law(
                    cfg, [*applied, config["repair"]], soundness)).law
            except ExactUnavailable as e:
                res["repaired_status"] = f"{e.status}: {e.reason}"
        for hid in engine.hypotheses:  # every registered hypothesis: an exact mechanism test each
            res["hypotheses"][hid] = timed(f"hypothesis {hid}", lambda hid=hid: engine.hypothesis_law(cfg, hid)).law
        res["texts"] = engine.outcome_texts(cfg, sorted(set(res["on"]) | set(res["reference"])))
        distance = tv(res["on"], res["reference"])
        if witness and tol is not None and distance > tol and not res["soundness"]["mismatches"]:
            # mu's excess over P weighs `distance`: 3 / distance draws meet it with probability 1 - e^-3 (95%)
            draws = min(witness, max(WITNESS_FLOOR, math.ceil(3 / distance)))
            res["witness"] = timed("witness", lambda: witness_trace(engine, cfg, out, draws, seed, seal, applied))
    result = to_json(ExactResult(**res))
    write_json(out / "exact" / f"{cfg.id}.json", result)
    return result


WITNESS_FLOOR = 200  # witness draws at least: a violation often lies on paths likelier than mu's excess


def witness_trace(engine: Engine, cfg: Any, out: Path, draws: int, seed: int, seal: str,
                  applied: list[str]) -> dict[str, Any]:
    """The first on-arm draws traced and replayed (WitnessResult): the exact channel says by how much mu
    differs, this trace says where the engine first broke the contract on the way."""
    trace = Path("exact") / f"{cfg.id}.badc"
    (out / trace).parent.mkdir(parents=True, exist_ok=True)
    try:  # an earlier, interrupted attempt is resumed from its checkpoint, as a shard's is
        r = collect(engine, cfg, "on", draws, seed, trace_path=str(out / trace), seal=seal, applied=applied)
    except Exception as e:  # the laws stand without it; the report says the witness is missing and why
        return {"draws": draws, "trace": str(trace), "violations": 0, "contract": None,
                "error": f"{type(e).__name__}: {str(e)[:300]}"}
    return {"draws": draws, "trace": str(trace), "violations": r.violations, "contract": r.contract, "error": None}


def shard(config: dict[str, Any], arm: str, start: int, count: int, seed: int, out: Path, *,
          level: str | None = None, repair: str | None = None, progress: Any = None, seal: str = "") -> dict[str, Any]:
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {', '.join(ARMS)}")
    engine = engine_of(config)
    cfg = engine.parse_config(config)
    trace = out / "traces" / cfg.id / f"{arm}-{start}.badc"
    trace.parent.mkdir(parents=True, exist_ok=True)
    t, cpu = time.monotonic(), time.process_time()
    res = collect(engine, cfg, arm, count, seed, trace_path=str(trace), level=level, repair=repair, start=start,
                         progress=progress, seal=seal, applied=config.get("applied", ()))
    result = to_json(ShardResult(id=cfg.id, arm=arm, start=start, count=count, outcomes=res.outcomes,
                                 proposed=res.proposed, accepted=res.accepted, violations=res.violations,
                                 contract=res.contract, records=res.records, counters=res.counters,
                                 resumed=res.resumed, elapsed_s=round(time.monotonic() - t, 2),
                                 cpu_s=round(time.process_time() - cpu, 2), code=code_digest()))
    write_json(out / "shards" / cfg.id / f"{arm}-{start}.json", result)
    return result


def chain_arg(text: str) -> list[tuple[int, int]]:
    """`START:COUNT,START:COUNT,...` as (start, count) pairs."""
    try:
        pairs = [tuple(int(x) for x in part.split(":")) for part in text.split(",")]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 or p[0] < 0 or p[1] <= 0 for p in pairs):
        raise argparse.ArgumentTypeError(f"{text!r} is not START:COUNT,... with START >= 0 and COUNT > 0")
    return pairs  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m badc_replay.worker", description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="+", help="one campaign config as a JSON file (with --laws: one or more, "
                                             "each's laws in turn with one engine start)")
    ap.add_argument("--out", help="the campaign folder (not with --validate)")
    ap.add_argument("--laws", action="store_true", help="compute the exact laws")
    ap.add_argument("--exact", action="store_true", help="compute the exact channel's laws")
    ap.add_argument("--soundness", type=int, default=0, metavar="N",
                    help="with --exact: leaves of each enumeration re-run (soundness pass)")
    ap.add_argument("--witness", type=int, default=0, metavar="N",
                    help="with --exact and --tol: where TV(mu, P) > tol, trace and replay the first on-arm draws, "
                         f"max({WITNESS_FLOOR}, 3 / TV) of them, N at most")
    ap.add_argument("--tol", type=float, default=None, help="with --exact: the campaign's exact tolerance")
    ap.add_argument("--validate", action="store_true", help="check engine-native keywords of a list of configs")
    ap.add_argument("--serve", action="store_true",
                    help="with --validate: then wait for one job's arguments, as a JSON list on one stdin line, "
                         "and run it in this process (the engine imported once); an empty line or none: exit")
    ap.add_argument("--arm", choices=ARMS)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", default=None, choices=LEVELS, help="default: the engine's trace level")
    ap.add_argument("--repair", default=None)
    ap.add_argument("--seal", default="", help="the campaign seal, written into each trace header")
    ap.add_argument("--chain", type=chain_arg, default=None, metavar="START:COUNT,...",
                    help="instead of --start/--count: shards of one arm run in turn in this process, one engine "
                         "start for all (badc run --anytime's looks)")
    ap.add_argument("--stop", default=None, metavar="FILE",
                    help="with --chain: run no further shard once FILE exists (the config is decided)")
    args = ap.parse_args(argv)
    if len(args.config) > 1 and not (args.exact or (args.laws and not args.count)):
        ap.error("several configs only with --laws (and no pilot --count) or --exact")
    configs = [json.loads(Path(path).read_text()) for path in args.config]
    config = configs[0]
    if not args.validate and not args.out:
        ap.error("--out is required")
    out = Path(args.out or ".")
    try:
        if args.validate:
            if not args.serve:
                print(json.dumps(validate(config)))
                return 0
            # an engine may print on stdout while it is imported: the verdict line is marked
            print(f"{VERDICT}{json.dumps(validate(config))}", flush=True)
            return _serve()
        else:
            arm = PILOT_ARM if args.laws else args.arm

            def progress_of(start: int, count: int) -> Callable[..., None]:
                def progress(done: int, resumed: bool = False) -> None:
                    word = "resumed" if resumed else "progress"
                    print(f"{word} {arm} {done}/{count} {start}", file=sys.stderr, flush=True)
                return progress

            if args.laws or args.exact:
                failed = 0
                for one in configs:
                    try:
                        if args.exact:
                            t = time.monotonic()
                            exact(one, out, soundness=args.soundness, witness=args.witness, tol=args.tol,
                                  seed=args.seed, seal=args.seal)
                            # the runner shows each config as it is done (a chain holds several)
                            print(f"exact {one.get('id')} {time.monotonic() - t:.1f}", file=sys.stderr, flush=True)
                        else:
                            laws(one, out, seed=args.seed, pilot=args.count, progress=progress_of(0, args.count))
                    except Exception:  # the others' laws are still computed; the runner retries this one
                        if len(configs) == 1:
                            raise
                        what = "exact channel" if args.exact else "laws"
                        print(f"worker: {what} of config {one.get('id')!r} failed:", file=sys.stderr)
                        traceback.print_exc()
                        failed += 1
                return 1 if failed else 0
            shards = args.chain or [(args.start, args.count)]
            if args.arm is None or any(count <= 0 for _, count in shards):
                ap.error("give --laws, or --arm with --count > 0 or a --chain")
            for start, count in shards:
                if args.stop and Path(args.stop).exists():
                    break
                shard(config, args.arm, start, count, args.seed, out, level=args.level, repair=args.repair,
                      progress=progress_of(start, count), seal=args.seal)
    except NotImplementedError as e:
        print(f"worker: {e}", file=sys.stderr)
        return 3
    return 0


VERDICT = "badc-verdict "  # --validate --serve: the prefix of the verdict's line on stdout


def _serve() -> int:
    """After the verdict, run the job the runner hands over on stdin (none: exit), in this process."""
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nobody reads stdout from here on: a full pipe would stop an engine that logs there
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    argv = json.loads(line)
    if not isinstance(argv, list) or "--validate" in argv:
        raise SystemExit(f"worker --serve: expected a job's arguments as a JSON list, got {line[:200]!r}")
    return main([str(a) for a in argv])


def _has_children() -> bool:
    """Whether this process has a child process (True where /proc cannot tell)."""
    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return True
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] == me:
                    return True
        except (OSError, IndexError):
            continue
    return False


if __name__ == "__main__":
    code = main()
    # Every result is on disk (atomic writes, traces closed) and the streams are flushed: the engines'
    # teardown at exit buys nothing here (vLLM frees its KV cache for about 4 s per process), so it is
    # skipped, unless a child process would be left behind without it.
    sys.stdout.flush()
    sys.stderr.flush()
    if not _has_children():
        os._exit(code)
    sys.exit(code)
