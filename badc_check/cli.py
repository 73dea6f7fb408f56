"""The `badc` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from badc_trace.files import write_json
from badc_trace.tiny import engines

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence


def _cmd_check(args: argparse.Namespace) -> int:
    from badc_check.counts_io import CountsError, load_counts
    from badc_check.decide import decide_all
    from badc_check.report_text import decisions_table

    try:
        settings, configs = load_counts(args.counts)
    except CountsError as e:
        print(f"badc check: {e}", file=sys.stderr)
        return 2
    decisions = decide_all(configs, alpha=settings["alpha"], threshold=settings["threshold"], m=settings["m"],
                           anytime=args.anytime)
    if args.json:
        print(json.dumps({**settings, "anytime": args.anytime, "configs": [d.to_dict() for d in decisions]},
                         indent=1))
    else:
        print(decisions_table(decisions, settings, anytime=args.anytime))
    return _exit_with("badc check", [d.to_dict() for d in decisions], contract_required=False)


def _exit_with(command: str, configs: Iterable[Mapping[str, Any]], pending: Iterable[Mapping[str, Any]] = (),
               contract_required: bool = True) -> int:
    """The decisions' exit status (badc_check/outcome.py), with each finding behind it on stderr."""
    from badc_check.outcome import outcome

    result = outcome(configs, pending, contract_required=contract_required)
    for line in result.lines(command):
        print(line, file=sys.stderr)
    return result.exit_code


def _write_plan(configs: Sequence[dict[str, Any]], out: str) -> int:
    """`badc run --plan`: each config's planned draws per arm from its exact laws, to OUT/plan.json."""
    plan = {c["id"]: {"status": c["exact"]["status"], "tv": c["exact"]["tv"], "draws": c["exact"]["plan"]}
            for c in configs}
    path = f"{out}/plan.json"
    write_json(path, plan, indent=1)
    for cid, p in plan.items():
        what = (f"{p['draws']:,} draws per arm" if isinstance(p["draws"], int) else p["draws"] or
                ("none: mu and P are equal within tol, no number of draws detects it"
                 if p["status"] == "EQUAL_WITHIN_TOL" else f"none ({p['status']})"))
        print(f"{cid}: {what}")
    print(f"badc run --plan: written to {path} (90% power of the sampled decision at this campaign's m and alpha)",
          file=sys.stderr)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from badc_check.campaign import BUILTIN, CampaignError, installed_only, load_campaign, run_campaign

    out = args.out
    try:
        exact = "only" if (args.exact_only or args.plan) else "on" if args.exact else None
        campaign = load_campaign(args.campaign or BUILTIN, draws=args.draws, confirm_draws=args.confirm,
                                 anytime=args.anytime or None, confirm_anytime=args.confirm_anytime or None,
                                 exact=exact)
        if not args.campaign:
            campaign = installed_only(campaign)
        out = out or f"badc-out/{campaign.name}"
        only = None if args.only is None else [i for i in args.only.split(",") if i]
        report = run_campaign(campaign, out, workers=args.workers, executor=args.executor, plots=not args.no_plots,
                              partial=args.partial, only=only)
    except CampaignError as e:
        print(f"badc run: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"badc run: interrupted; every finished shard is kept in {out}. Run the same command again to "
              "complete the sealed roster, or add --partial for a report of the configs already done.",
              file=sys.stderr)
        return 130
    if args.plan:
        return _write_plan(report.configs, out)
    print(open(f"{out}/{report.name}.md").read())
    print(f"badc run: report in {out}/{report.name}.json and {out}/{report.name}.md ({report.elapsed_s} s)",
          file=sys.stderr)
    return _exit_with("badc run", report.configs, report.get("pending", ()))


def _trace_set(path: str) -> list[str]:
    """The traces of one run: every trace in a folder, or FILE with the traces badc-trace wrote beside
    it for the run's other processes (FILE.PID.badc)."""
    from badc_trace.launcher import process_traces

    p = Path(path)
    if p.is_dir():
        found = sorted(str(q) for q in p.glob("*.badc"))
        if not found:
            raise ValueError(f"{path}: a folder with no .badc trace in it")
        return found
    if not p.exists():
        raise ValueError(f"{path}: no such trace")
    return [str(q) for q in process_traces(path)] or [path]


def _replay_in_build(args: argparse.Namespace) -> int | None:
    """Parts of a contract that need the engine (transformers' D2/D3) are checked by running the same
    command under the interpreter of the trace's build: a build declared in its engine's builds file and set up here,
    nothing else (a trace is data: no interpreter or program named in it is ever run). None when this
    interpreter is that build's, or when no such build is set up (said on stderr; the caller reports
    what stays unchecked)."""
    import subprocess

    from badc_check.builds import build_for
    from badc_trace.format import read_trace

    header = read_trace(_trace_set(args.trace)[0], allow_torn_tail=True).header
    try:
        python = build_for(header["engine"], header["build"]).python
    except LookupError as e:
        print(f"badc replay: the trace needs engine build {header['engine']}-{header['build']} to check what "
              f"needs the engine: {e}", file=sys.stderr)
        return None
    if python.parent.parent.resolve() == Path(sys.prefix).resolve():  # already in that environment
        return None
    cmd = [str(python), "-m", "badc_check.cli", "replay", args.trace, "--limit", str(args.limit)]
    cmd += (["--json"] if args.json else []) + (["--scores"] if args.scores else [])
    return subprocess.run(cmd, env={**os.environ, "BADC_REPLAY_IN_BUILD": "1"}).returncode


def _cmd_replay(args: argparse.Namespace) -> int:
    """Exit 0 only when every request was checked in full and none broke the contract; 1 on a violation;
    2 on a usage or format error; 3 when anything was left unchecked (docs/interfaces.md, "Commands")."""
    from badc_check.decide import exposure_line
    from badc_replay.contract import BROKEN, UNCHECKED, replay_traces
    from badc_trace.format import TraceFormatError

    if args.scores:
        return _cmd_scores(args)
    try:
        paths = _trace_set(args.trace)
        res = replay_traces(paths)
    except (TraceFormatError, ValueError, OSError) as e:
        print(f"badc replay: {e}", file=sys.stderr)
        return 2
    if len(paths) > 1:
        print(f"badc replay: {len(paths)} traces of one run, joined by request id: {', '.join(paths)}",
              file=sys.stderr)
    if res.unchecked and not os.environ.get("BADC_REPLAY_IN_BUILD"):
        rc = _replay_in_build(args)
        if rc is not None:
            return rc
    status = res.status
    if args.json:
        print(json.dumps(res.to_dict(), indent=1))
    else:
        print(f"{args.trace}: {res.engine}, {res.requests} requests, {res.calls} calls, {res.violations} violating "
              f"calls in {len(res.violating_requests)} requests: contract {status}")
        for rid in sorted(res.first_per_request)[: args.limit]:
            print(f"  {res.first_per_request[rid].message(res.decode)}")
        if res.exposure:
            print(f"  {exposure_line(res.exposure, res.requests)}")
        if res.first_carry_over is not None:
            print(f"  drafter state carried over: {res.carried_over} requests did not start from the first "
                  f"request's drafter settings (a draw may depend on the draws before it); first: "
                  f"{res.first_carry_over.message()}")
    for note in res.notes:
        print(f"badc replay: NOTE: {note}", file=sys.stderr)
    for path in res.unclosed:
        print(f"badc replay: {path}: its process was killed before it closed the trace; it wrote every record "
              "through, so none is lost", file=sys.stderr)
    for why in res.left_unchecked():
        print(f"badc replay: UNCHECKED: {why}", file=sys.stderr)
    return {BROKEN: 1, UNCHECKED: 3}.get(status, 0)


def _cmd_scores(args: argparse.Namespace) -> int:
    """`badc replay --scores`: the score-level study (badc_replay/scores.py). Exit 1 when an exposed request
    is a mechanism witness; 0 when every request is exposed and agrees with its references; 3 otherwise
    (an unexposed request tests nothing; a TV between the two thresholds decides nothing), said on stderr."""
    from badc_replay.score_study import score_study
    from badc_replay.scores import AGREE_TV, ScoresUnavailable
    from badc_trace.format import TraceFormatError

    try:
        paths = _trace_set(args.trace)
        study = score_study(paths)
    except ScoresUnavailable as e:
        rc = None if os.environ.get("BADC_REPLAY_IN_BUILD") else _replay_in_build(args)
        if rc is not None:
            return rc
        print(f"badc replay: UNCHECKED: no score-level study: {e}", file=sys.stderr)
        return 3
    except (TraceFormatError, ValueError, OSError) as e:
        print(f"badc replay: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(study.to_dict(), indent=1))
    else:
        print(f"{args.trace}: {study.engine}, {study.summary()}")
        shown = [r for r in study.requests if r.witness] or list(study.requests)
        for r in shown[: args.limit]:
            w = r.witness
            line = (f"  request {r.request}: {'exposed' if r.exposed else 'UNEXPOSED'}, {len(r.calls)} calls, "
                    f"{r.mismatches} history mismatches, max TV against intended {r.max_tv_intended:.4g}, against "
                    f"actual history {r.max_tv_actual:.3g}, target scores {r.max_tv_target:.3g}")
            if w is not None:
                line += (f"; WITNESS at call {w.record} ({w.role}, position {w.position}): history {list(w.history)}, "
                         f"intended {list(w.intended)}, TV {w.tv_intended:.4g}")
            print(line)
    unexposed = sum(not r.exposed for r in study.requests)
    undecided = sum(r.exposed and r.witness is None and not r.agrees for r in study.requests)
    if unexposed:
        print(f"badc replay: UNCHECKED: {unexposed} of {len(study.requests)} requests unexposed (the drafter proposed "
              "no token): they test nothing", file=sys.stderr)
    if undecided:
        print(f"badc replay: UNCHECKED: {undecided} exposed requests neither witness nor agree within {AGREE_TV:g} "
              "(or had no checked call: plain sampling needs the returned logits, output_logits=True)",
              file=sys.stderr)
    for why in study.left_unchecked:
        print(f"badc replay: UNCHECKED: {why}", file=sys.stderr)
    return 1 if study.witnesses else 3 if unexposed or undecided or study.left_unchecked else 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from badc_replay.diff import markdown
    from badc_trace.format import TraceFormatError

    try:
        report = markdown(_trace_set(args.a), _trace_set(args.b), by_prefix=args.by_prefix)
    except (TraceFormatError, ValueError, OSError) as e:
        print(f"badc diff: {e}", file=sys.stderr)
        return 2
    print(report.markdown, end="")
    if not report.compared:  # "no divergence" about nothing is not a result
        print("badc diff: UNCHECKED: nothing was compared (no request on both sides" +
              (", or no call of A at a logical prefix B reached" if args.by_prefix else "") + ")", file=sys.stderr)
        return 3
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    from badc_check.models_cmd import run

    return run(args.engine, args.seed, args.prompt, args.json)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="badc",
        description="Branch-aware differential conformance testing: is an engine's speculative decoding "
                    "lossless once processors, stop rules and records are composed with it?")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    c = sub.add_parser("check", help="turn arm counts collected elsewhere into decisions",
                       description="Decide every configuration of a COUNTS.json file (schema: docs/interfaces.md, "
                                   "'Outcomes and counts'; docs/counts.md).",
                       epilog="Exit status: 0 when every config was decided and none FAILS; 1 when one FAILS or "
                              "its contract channel (if the file has one) is broken; 2 on a usage or format "
                              "error; 3 when no config FAILS but one is INCONCLUSIVE or VOID or its contract is "
                              "unchecked, each said on stderr.")
    c.add_argument("counts", metavar="COUNTS.json")
    c.add_argument("--json", action="store_true", help="print the decision fields as JSON")
    c.add_argument("--anytime", action="store_true",
                   help="use anytime-valid confidence sequences (valid at every look) instead of fixed-n "
                        "Clopper-Pearson bounds")
    c.set_defaults(func=_cmd_check)
    r = sub.add_parser("run", help="run a campaign (the built-in one with no file)",
                       description="Seal a campaign, collect both arms of every config in worker processes under "
                                   "each build's interpreter, replay the on-arm traces, decide and confirm repairs.",
                       epilog="Exit status: 0 only when every config was decided from work done in full, none "
                              "FAILS and every contract held; 1 when a config FAILS or a trace replay broke the "
                              "contract; 2 on a usage or campaign-file error; 3 when nothing was rejected but "
                              "something was left unchecked (an INCONCLUSIVE or VOID config, a contract not "
                              "replayed in full, a model without an exact law, a parameter that never acted on "
                              "a draft, a config still pending in a partial report), each said on stderr; 130 "
                              "when interrupted.")
    r.add_argument("campaign", nargs="?", metavar="CAMPAIGN.toml", help="default: the built-in campaign")
    r.add_argument("--out", help="output folder (default: badc-out/CAMPAIGN_NAME)")
    r.add_argument("--draws", type=int, help="draws per arm (default: the campaign's)")
    r.add_argument("--confirm", type=int, help="draws per arm for repair confirmation (default: the campaign's)")
    r.add_argument("--workers", type=_positive, default=2, help="worker processes (default 2)")
    r.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local worker processes, or Ray tasks (RAY_ADDRESS selects a cluster; default: a local one)")
    r.add_argument("--anytime", action="store_true",
                   help="stop a config at the first planned look (prefixes of n/128, ..., n/2, n draws per arm) "
                        "that decides FAILS with eligible evidence or VOID, the error budget spent over the looks "
                        "(sealed: a folder is anytime or not); NOT_REJECTED still needs all n draws")
    r.add_argument("--confirm-anytime", action="store_true",
                   help="stage S3: stop the unrepaired confirmation arm at the first planned look whose prefixes "
                        "show recurrence (the off and repaired arms are still drawn whole; sealed)")
    r.add_argument("--exact", action="store_true",
                   help="add the exact channel to every config (computed first, seconds each): mu of the live "
                        "speculation-on engine with only its random draws scripted, against P, reported beside "
                        "the sampled decision and never folded into it")
    r.add_argument("--exact-only", action="store_true",
                   help="compute only the exact channel, no draws ([campaign] exact = \"only\"): exit 1 when a "
                        "config DIFFERS, 3 when one is UNEXERCISED, NOT_ENUMERABLE or UNSUPPORTED, 0 only when "
                        "every config is EQUAL_WITHIN_TOL")
    r.add_argument("--plan", action="store_true",
                   help="write each config's planned draws per arm (90%% power of the sampled decision at the "
                        "campaign's m and alpha) from its exact laws to OUT/plan.json; no draws")
    r.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    r.add_argument("--partial", action="store_true",
                   help="run nothing: report the configs whose jobs in --out are all done (report-partial.md); "
                        "safe while the campaign runs")
    r.add_argument("--only", metavar="ID[,ID...]",
                   help="run only these configs' jobs, e.g. to do the undecided ones first or to split a roster "
                        "over machines; the seal, draws and m stay the whole roster's (report-partial.md until "
                        "every job is done)")
    r.set_defaults(func=_cmd_run)
    rp = sub.add_parser("replay", help="check a trace against the sequential contract (exit 1 on a violation)",
                        description="Replay every request of a trace: processors must see the position's logical "
                                    "prefix (D1), stop re-checks what sequential decoding evaluated (D3). Prints the "
                                    "first violating call of each request: which call, which prefix, expected, seen.",
                        epilog="Exit status: 0 only when every request was checked in full and none broke the "
                               "contract; 1 on a violation; 2 on a usage or format error; 3 when anything was "
                               "left unchecked (a part of the contract this interpreter cannot check, a torn tail, "
                               "no request, records that name no request), each said on stderr.")
    rp.add_argument("trace", metavar="TRACE",
                    help="a trace, or a folder with one run's traces (vLLM's engine core writes its own: the "
                         "traces are joined by request id, as are FILE and the FILE.PID.badc beside it)")
    rp.add_argument("--json", action="store_true")
    rp.add_argument("--limit", type=int, default=5, help="requests to show (default 5)")
    rp.add_argument("--scores", action="store_true",
                    help="the score-level study instead (needs a trace at --level full): at every processor-list "
                         "call, the history a stateful processor was fed against the intended one, and score TVs "
                         "against fresh processors along the logical prefix and along the request's own calls; "
                         "exit 1 on a mechanism witness (history mismatch and TV > 0.001 in an exposed request), 0 "
                         "when every request is exposed and within 1e-4 of its references, 3 otherwise")
    rp.set_defaults(func=_cmd_replay)
    df = sub.add_parser("diff", help="the first divergence of two traces, as Markdown for a bug report",
                        description="Match requests by id (draw index) and print the first call that differs, "
                                    "e.g. the faulty arm against the repaired arm of one configuration, on the "
                                    "same seeds. With --by-prefix, match calls by their logical prefix instead: "
                                    "a program run with speculation (A) against the same program without it "
                                    "(B), where the records cannot be matched one to one.",
                        epilog="Exit status: 0 with the Markdown (a divergence or none), 2 on a usage or format "
                               "error, 3 when nothing was compared (no request on both sides, or by prefix no "
                               "call at a prefix both reached).")
    df.add_argument("a", metavar="TRACE_A", help="a trace, or a folder with one run's traces (as for replay)")
    df.add_argument("b", metavar="TRACE_B")
    df.add_argument("--by-prefix", action="store_true",
                    help="the first call of A that saw or gave something else than B's call of the same kind at "
                         "the same logical prefix (ids exact, scores within 1e-4)")
    df.set_defaults(func=_cmd_diff)
    mo = sub.add_parser("models", help="show each installed build's tiny model and its first-step law",
                        description="For every installed engine build, load the embedded tiny model in "
                                    "the real engine and print its exact next-token law after the prompt.")
    mo.add_argument("--engine", action="append", choices=engines(), help="only this engine (repeatable)")
    mo.add_argument("--seed", type=int, help="model seed (default: each engine's default tiny seed)")
    mo.add_argument("--prompt", help="prompt text (default: abcdabcdab)")
    mo.add_argument("--json", action="store_true")
    mo.set_defaults(func=_cmd_models)
    for command in sub.choices.values():  # every command: badc's own failure is never read as a verdict
        command.epilog = (command.epilog or "Exit status: 0 on success, 2 on a usage error.") + \
            " 4 when badc itself failed (a defect in badc: one line on stderr, the traceback in a file)."
    return ap


def main(argv: list[str] | None = None) -> int:
    from badc_trace.failure import guarded

    args = build_parser().parse_args(argv)
    try:
        return guarded(f"badc {args.command}", lambda: args.func(args))
    except KeyboardInterrupt:
        print("badc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
