"""report.md: the campaign's decisions as Markdown (report.json holds the same as data)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from badc_check.confirmation import WITNESS_LIMIT
from badc_check.decide import contract_cell, contract_lines
from badc_check.delta_b import delta_b_line
from badc_check.exact import NOTE, exact_cell, exact_lines


def exact_only_markdown(report: Mapping[str, Any]) -> str:
    """`badc run --exact-only`: the exact channel of every config, no draws."""
    lines = [f"# badc report: {report['campaign']} (exact channel only)", "",
             f"Seal `{report['seal'][:16]}`; tolerance {report['exact_tol']:g}; threshold {report['threshold']}. "
             "mu is the law of the live speculation-on engine with only its random draws scripted, enumerated "
             f"exactly; P the speculation-off engine's. EQUAL_WITHIN_TOL is {NOTE}; it is never \"conforms\". "
             "No draws were made: no sampled decision, no contract replay.", "",
             "| config | engine | build | role | exact | TV(mu, P) | material | structural mass | witness mass | "
             "paths | seconds | planned draws per arm |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def g(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int)
                                      and not isinstance(v, bool) else str(v))

    for c in report["configs"]:
        e = c["exact"]
        secs = sum(e.get("seconds", {}).values())
        lines.append(f"| {c['id']} | {c['engine']} | {c['build']} | {c['role']} | **{e['status']}** | {g(e['tv'])} | "
                     f"{g(e['material'])} | {g(e['structural_mass'])} | {g(e['witness_mass'])} | {g(e['paths'])} | "
                     f"{secs:.1f} | {g(e['plan'])} |")
    for c in report["configs"]:
        lines += ["", f"## {c['id']}: {c['exact']['status']}", ""]
        lines += [f"- {line}" for line in exact_lines(c["exact"])]
    if report.get("pending"):
        lines += ["", "Pending (not computed yet): " + ", ".join(p["id"] for p in report["pending"])]
    return "\n".join(lines) + "\n"


def report_markdown(report: Mapping[str, Any]) -> str:
    if report.get("exact_only"):
        return exact_only_markdown(report)

    def f(v: Any) -> str:
        return "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))

    conf = (f"; confirmation at alpha {report['alpha']} over its own m = {report['confirm_m']} (one attempt per "
            f"cause and build; attempted: {', '.join(report['confirmation_attempts']) or 'none'})"
            if report.get("confirm_draws") and "confirm_m" in report else "")
    lines = [f"# badc report: {report['campaign']}", "",
             f"Seal `{report['seal'][:16]}`; alpha {report['alpha']} family-wise over m = {report['m']}{conf}; "
             f"threshold {report['threshold']}; {report['draws']:,} draws per arm"
             + (f", {report['confirm_draws']:,} per confirmation arm" if report.get("confirm_draws") else "") + ". "
             "NOT_REJECTED means the test did not reject; it is not evidence of conformance.", ""]
    if report.get("confirm_draws_needed"):
        lines += [f"**{report['confirm_draws']:,} draws per confirmation arm cannot confirm any repair: at least "
                  f"{report['confirm_draws_needed']:,} can** (with fewer, a repaired arm without a single witness "
                  f"still bounds its witness rate above {WITNESS_LIMIT:g}). A repair below reported not confirmed "
                  "may be so for that reason alone.", ""]
    if report.get("anytime"):
        looks = report["anytime"]
        lines += [f"Anytime: {len(looks)} planned looks per config at "
                  + ", ".join(f"{lk['draws']:,}" for lk in looks) + " draws per arm, the error budget spent over "
                  "them (the last look half of it); a config stops at its first look with an eligible FAILS or "
                  "VOID.", ""]
    if report.get("confirm_anytime"):
        looks = report["confirm_anytime"]
        lines += [f"Stage S3 with looks: {len(looks)} planned looks at "
                  + ", ".join(f"{lk['draws']:,}" for lk in looks) + " draws per confirmation arm; the unrepaired "
                  "arm stops at its first look that recurs, the off and repaired arms are drawn whole.", ""]
    if report.get("worker_core_hours"):
        w = report["worker_core_hours"]
        lines += [f"Worker time of the shards in this folder: {w['elapsed']:.2f} core-hours elapsed"
                  + (f", {w['cpu']:.2f} CPU" if w["cpu"] is not None else "") + ".", ""]
    versions, laws = report.get("code_versions") or {}, report.get("laws_code_versions") or {}
    drawing = {**versions, **laws}
    if len(drawing) > 1:
        drew = "; ".join(f"{v}: " + ", ".join(
            f"{n} {what}{'' if n == 1 else 's'}" for what, n in (("shard", versions.get(v, 0)),
                                                                ("laws file", laws.get(v, 0))) if n)
            for v in drawing)
        lines += [f"**The shards and laws were drawn by {len(drawing)} versions of badc's drawing code** ({drew}): "
                  "the campaign was resumed after badc changed. The seal covers configs, seeds and settings, not "
                  "badc: where the change touched a harness, a probe, an exact law or a frozen repair, its arms "
                  "and laws may mix two ways of drawing.", ""]
    elif drawing:
        lines += [f"Drawing code: {next(iter(drawing))} (every shard and laws file).", ""]
    if "pending" in report:
        lines += [f"**Partial report: {len(report['configs'])} of {report['m']} configs decided**, each with the "
                  "whole roster's m, so these decisions are final; the pending configs are listed at the end.", ""]
    elif report.get("interrupted"):
        lines += ["**This campaign was interrupted and completed from its sealed roster** "
                  f"({report['jobs_reused']} jobs reused, {report.get('draws_resumed', 0):,} draws taken over from "
                  "checkpoints of cut-off shards).", ""]
    lines += ["D bounds the distance between the arms' returned-output laws from below; the contract column is "
              "the trace replay of the on arm, its own channel, never folded into D.", "",
              "| config | engine | build | role | decision | eligible | D | witnesses | proposed | "
              "calibration | hypothesis | repair | contract |" + (" exact |" if "exact_tol" in report else ""),
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if "exact_tol" in report else "")]
    for c in report["configs"]:
        hyp = c.get("hypothesis")
        hyp_s = "-" if not hyp else (f"{hyp['id']}: {'compatible' if hyp['compatible'] else 'incompatible'}, null "
                                     f"{'rejected' if hyp['null_rejected'] else 'not rejected'}")
        rep = c.get("repair")
        rep_s = "-" if not rep else (f"{rep['id']}: not attempted" if rep.get("attempted") is False else (
            f"{rep['id']}: {'confirmed' if rep['confirmed'] else 'not confirmed'} (recurrence {rep['recurrence']:.4f}"
            f"{_recurrence_at(rep.get('recurrence_look'))}, gap UB {rep['gap_ub']:.4f}, witness UB "
            f"{rep['witness_ub']:.1e})"))
        build = c["build"] + "".join(f" + {r}" for r in c.get("applied", []))
        # a model without an exact law: neither can be checked, and the table never shows a pass for them
        unchecked = c.get("family_source") == "pilot"
        wit = "not checkable" if unchecked else c["witnesses"]
        cal = "not checkable" if unchecked else f(c["calibration"]["passed"])
        lines.append(f"| {c['id']} | {c['engine']} | {build} | {c['role']} | **{c['decision']}** | "
                     f"{'yes' if c['eligible'] else 'no'} | {f(c.get('D'))} | "
                     f"{wit} | {f(c['exercise']['proposed'])} | {cal} | "
                     f"{hyp_s} | {rep_s} | {contract_cell(c.get('contract'))} |"
                     + (f" {exact_cell(c.get('exact'))} |" if "exact_tol" in report else ""))
    for c in report["configs"]:
        lines += ["", f"## {c['id']}: {c['decision']}", ""]
        if c.get("applied"):
            lines.append(f"- tested on {c['engine']} {c['build']} with {', '.join(c['applied'])} applied to both "
                         "arms (and to the repaired arm): the decision is about the build past "
                         + ("that known defect" if len(c["applied"]) == 1 else "those known defects"))
        if c.get("variant"):
            v = c["variant"]
            lines.append(f"- held-out variant of {v['of']}: " + ", ".join(f"{k} {v[k]!r}" for k in ("model", "prompt")
                                                                         if k in v) + " (nothing else retuned)")
        lines += [f"- {r}" for r in c.get("reasons", [])]
        if c.get("repair"):
            lines += [f"- repair {c['repair']['id']}: {r}" for r in c["repair"].get("reasons", [])]
            if c["repair"].get("contract"):
                lines.append(f"- repair {c['repair']['id']}: {_repaired_contract(c['repair']['contract'])}")
            if c["repair"].get("delta_b"):
                lines.append(f"- {delta_b_line(c['repair']['delta_b'])}")
        if c.get("anytime"):
            lk = c["anytime"]
            lines.append(f"- decided at look {lk['look']} of {lk['of']}: {lk['draws']:,} draws per arm, "
                         f"{lk['spend']:.4g} of the budget")
        w = c.get("without_hypothesis_events")
        if w:
            lines.append(f"- without A_H({(c.get('hypothesis') or {}).get('id')}) and its complement (RQ3's cell, the "
                         f"paper's post hoc check; the same draws, {w['events']} events): {w['decision']}"
                         + (" (eligible)" if w["eligible"] else "") + f", D {f(w['D'])} on `{w['D_event']}`")
        if c.get("D_event"):
            lines.append(f"- D attained on `{c['D_event']}`; crash-free returned-output D {f(c.get('D_crash_free'))} "
                         f"on `{c.get('D_crash_free_event')}`; {c.get('events')} events, B = {c.get('bounds')}")
        if c.get("witness_outcomes"):
            lines.append("- witness outcomes: " + ", ".join(f"`{y}` x{k}" for y, k in
                                                          list(c["witness_outcomes"].items())[:8]))
        contract = c.get("contract")
        lines += [f"- {line}" for line in contract_lines(contract, c["decision"])]
        if contract and contract.get("first_violation"):
            lines.append(f"- first contract violation: {contract['first_violation']['message']}")
        if contract and contract.get("carried_over"):
            lines.append(f"- drafter state carried over: {contract['carried_over']:,} of {contract['requests']:,} "
                         f"requests did not start from the first request's drafter settings, so a draw may "
                         f"depend on the draws before it; first: {contract['first_carry_over']['message']}")
        if c.get("records", {}).get("status") == "complete":
            lines.append(f"- records (channel R): {'FAILED' if c['records']['failed'] else 'not rejected'}, "
                         f"gap {f(c['records'].get('gap'))}")
        if c.get("comparator"):
            cmp = c["comparator"]
            lines.append(f"- comparator C (permutation chi-square, full outputs, no oracle): p = {cmp['p_value']:.4g} "
                         f"at level {cmp['level']:.3g}, {'rejected' if cmp['rejected'] else 'not rejected'}: "
                         f"{cmp['agreement']}")
        if c.get("marginals"):
            mg = c["marginals"]
            cells = "; ".join(f"{obs} {cmp} {b['tv']:.4f} [{b['lower']:.4f}, {b['upper']:.4f}]"
                              for obs, row in mg["bounds"].items() for cmp, b in row.items())
            lines.append(f"- marginal TV, empirical [simultaneous bounds at 1 - {mg['alpha']:.3g}, every union of "
                         f"categories, {mg['events']} events]: {cells}")
        if c.get("exact"):  # beside the decision, never folded into it
            lines += [f"- {line}" for line in exact_lines(c["exact"])]
        if c.get("simulator_check") is not None:
            metric = f" ({c['simulator_metric']})" if c.get("simulator_metric") else ""
            lines.append(f"- hypothesis simulator with logical reads reproduces P to {c['simulator_check']:.1e}"
                         + metric)
    if report.get("pending"):
        lines += ["", "## Pending (jobs not all done)", "",
                  "| config | laws | draws done per arm | not done in this run (the next run retries) | discovery "
                  "(final; its confirmation is not) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {p['id']} | {'done' if p['laws'] else 'pending'} | "
                  + (", ".join(f"{arm} {n}" for arm, n in p["draws"].items()) or "-")
                  + f" | {p['failed'] or p.get('waiting') or '-'} | {p.get('discovery', '-')} |"
                  for p in report["pending"]]
    return "\n".join(lines) + "\n"


def _recurrence_at(look: dict | None) -> str:
    """Under confirm_anytime: where the unrepaired arm's recurrence was judged."""
    return "" if look is None else f" at look {look['look']} of {look['of']}, {look['draws']:,} draws"


def _repaired_contract(c: dict) -> str:
    """The repaired arm's trace replay, beside the confirmation rule."""
    if c["status"] == "held":
        return (f"the repaired arm's calls keep the contract ({c['calls']:,} calls of {c['requests']:,} requests "
                "replayed)")
    if c["status"] == "broken":
        first = (c.get("first_violation") or {}).get("message", "")
        return (f"the repaired arm's calls BREAK the contract ({c['violations']:,} violations in "
                f"{c['violating_requests']:,} of {c['requests']:,} requests; first: {first})")
    return f"the repaired arm's contract is unchecked ({'; '.join(c['left_unchecked'])})"
