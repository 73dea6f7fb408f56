"""pytest plugin (entry point `pytest11: badc`): conformance checks in an engine's own test suite.

    import pytest

    @pytest.mark.badc_campaign("tests/spec_decoding.toml", draws=4000)
    def test_speculative_decoding_is_lossless():
        pass            # fails if any configuration of the campaign FAILS

    def test_min_tokens(badc):
        report = badc.run("tests/min_tokens.toml", draws=4000)   # fails the test on any FAILS
        assert report["configs"][0]["calibration"]["passed"]

    @pytest.mark.badc_campaign("tests/spec_decoding.toml", exact_only=True)
    def test_speculative_law_is_exact():
        pass            # no draws: fails if any config's exact channel DIFFERS (deterministic, seconds)

With `exact_only=True` (or `exact=True` beside the draws) the exact channel runs (badc_check/exact.py):
a config whose speculation-on law mu DIFFERS from P fails the test, naming the exact TV and the events
that moved most; UNEXERCISED, NOT_ENUMERABLE and UNSUPPORTED are said in a `BadcUncheckedWarning`.

Campaigns run in this process with the engine importable here (no per-build environments needed);
reports go to pytest's temporary folder. NOT_REJECTED passes the test: it is not a proof of conformance.
A broken contract (trace replay found a call that saw what sequential decoding would not) fails the
test too, whatever the returned-output decision (`fail_on_broken_contract=False` to allow it). What was
not checked (an INCONCLUSIVE or VOID config, an unchecked contract, a model without an exact law, a
parameter that never acted on a draft: badc_check/outcome.py) is said in a `BadcUncheckedWarning`,
never passed silently. A failure of badc itself (an exception from inside badc, not a decision) is
reported as a test error, not a failure: it is no evidence about the engine.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the plugin loads in every pytest session: the runner is imported when a test runs one
    from badc_check.campaign.result import CampaignReport

FAILS = "FAILS"


class BadcUncheckedWarning(UserWarning):
    """A campaign in a test left something unchecked: it passed nothing, and says what."""


class BadcInternalError(RuntimeError):
    """badc itself failed while running a campaign: the test reports an error, never a failure."""


class BadcFixture:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.reports: list[CampaignReport] = []

    def run(self, campaign: str | Path, *, draws: int | None = None, fail_on: tuple[str, ...] = (FAILS,),
            plots: bool = False, fail_on_broken_contract: bool = True, exact: bool = False,
            exact_only: bool = False) -> CampaignReport:
        """Run a campaign file here; fail the calling test when a config's decision is in `fail_on`, its
        contract is broken or its exact channel DIFFERS (`exact`: beside the draws; `exact_only`: no
        draws); warn about what was left unchecked."""
        # Imported here: the plugin loads in every pytest session of an environment with badc installed.
        from badc_check.campaign import CampaignError, load_campaign, run_campaign
        from badc_check.exact import exact_lines
        from badc_check.outcome import outcome
        from badc_replay.exact import DIFFERS

        try:
            camp = load_campaign(campaign, draws=draws, exact="only" if exact_only else "on" if exact else None)
        except CampaignError as e:
            pytest.fail(f"badc: {e}", pytrace=False)
        out = self.tmp_path / f"badc-{camp.name}-{len(self.reports)}"
        try:
            report = run_campaign(camp, out, executor="inline", log=lambda m: None, plots=plots)
        except CampaignError as e:
            pytest.fail(f"badc: {e}", pytrace=False)
        except Exception as e:  # not a decision: badc's own defect
            from badc_trace.failure import write_traceback

            raise BadcInternalError(f"badc failed: {type(e).__name__}: {e} (a defect in badc; the traceback is in "
                                    f"{write_traceback('badc pytest plugin', e)})") from e
        self.reports.append(report)
        def contract(c: dict[str, Any]) -> str:
            return (c.get("contract") or {}).get("status", "unchecked")

        def differs(c: dict[str, Any]) -> bool:
            e = c.get("exact") or {}
            return e.get("status") == DIFFERS or bool((e.get("sampled_against_mu") or {}).get("rejected"))

        bad = [c for c in report.configs if c["decision"] in fail_on or differs(c)
               or (fail_on_broken_contract and contract(c) == "broken")]
        # what the test does not fail on is still said: an unchecked part, an off-arm violation (VOID)
        for line in outcome([c for c in report.configs if c not in bad]).lines("badc"):
            warnings.warn(BadcUncheckedWarning(line), stacklevel=2)
        if bad:
            lines = [f"badc: {len(bad)} configuration(s) of {camp.name} {'/'.join(fail_on)} or with a broken "
                     f"contract (report: {out})"]
            for c in bad:
                if c["decision"] is not None:
                    lines.append(f"  {c['id']} ({c['engine']} {c['build']}): {c['decision']}, contract "
                                 f"{contract(c)}; " + "; ".join(c["reasons"]))
                else:
                    lines.append(f"  {c['id']} ({c['engine']} {c['build']}):")
                if c.get("exact"):
                    lines += [f"    {line}" for line in exact_lines(c["exact"])]
                first = (c.get("contract") or {}).get("first_violation")
                if first:
                    lines.append(f"    first contract violation: {first['message']}")
            pytest.fail("\n".join(lines), pytrace=False)
        return report


@pytest.fixture
def badc(tmp_path: Path) -> BadcFixture:
    return BadcFixture(tmp_path)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "badc_campaign(path, draws=None, exact=False, exact_only=False): run a badc "
                                       "campaign for this test and fail it if any configuration FAILS or its exact "
                                       "channel DIFFERS")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # a marked test gets the fixture, so the campaign has a temporary folder
        if item.get_closest_marker("badc_campaign") is not None and "badc" not in getattr(item, "fixturenames", ()):
            item.fixturenames.append("badc")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(BadcInternalError):
        report.badc_internal = True
    return report


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    if getattr(report, "badc_internal", False):
        return "error", "E", "ERROR"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    marker = item.get_closest_marker("badc_campaign")
    if marker is None:
        return
    path = Path(marker.args[0])
    if not path.is_absolute():
        path = Path(item.config.rootpath) / path
    item.funcargs["badc"].run(path, draws=marker.kwargs.get("draws"), exact=marker.kwargs.get("exact", False),
                              exact_only=marker.kwargs.get("exact_only", False))
