"""badc's own failures exit 4 (one line, the traceback in a file), never 1, the status of a rejection."""

import badc_check.cli as cli
from badc_trace import launcher

pytest_plugins = ["pytester"]


def _boom(args):
    raise KeyError("a defect")


def test_an_exception_in_a_command_exits_4_with_the_traceback_in_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BADC_CRASH_DIR", str(tmp_path))
    monkeypatch.setattr(cli, "_cmd_models", _boom)
    assert cli.main(["models"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("badc models failed: KeyError: 'a defect' (a defect in badc; ")
    (written,) = tmp_path.glob("badc-failure-*.txt")
    assert "Traceback" in written.read_text() and "_boom" in written.read_text() and str(written) in err[0]


def test_badc_trace_failing_itself_exits_4(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BADC_CRASH_DIR", str(tmp_path))
    monkeypatch.setattr(launcher, "process_traces", lambda out: 1 / 0)
    assert launcher.main(["--out", str(tmp_path / "t.badc"), "--", "true"]) == 4
    assert "badc-trace failed: ZeroDivisionError" in capsys.readouterr().err


def test_the_every_command_help_documents_exit_4(capsys):
    for command in ("check", "run", "replay", "diff", "models"):
        try:
            cli.main([command, "--help"])
        except SystemExit:
            pass
        assert "4 when badc itself failed" in " ".join(capsys.readouterr().out.split())


def test_the_pytest_plugin_reports_badc_failing_as_an_error_not_a_failure(pytester):
    pytester.makepyfile(test_engine="""
        import badc_check.campaign as campaign

        def test_run(badc, monkeypatch, tmp_path):
            monkeypatch.setattr(campaign, "run_campaign", lambda *a, **k: {}["missing"])
            (tmp_path / "c.toml").write_text(
                '[campaign]\\nname = "t"\\ndraws = 10\\n[[config]]\\nid = "T-1"\\nrole = "probe"\\n'
                'engine = "toy"\\nbuild = "0.1.0"\\n')
            badc.run(tmp_path / "c.toml")
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*badc failed: KeyError*a defect in badc*"])
