"""Campaign files: every mistaken or hostile input is refused in one message naming the file, the config
and the key (with the nearest valid choice), before anything is sealed or written."""

from __future__ import annotations

import pytest

from badc_check.cli import main

BASE = '[campaign]\nname = "c"\ndraws = 10\n\n[[config]]\nrole = "probe"\n'
TOY = 'engine = "toy"\nbuild = "0.1.0"\n'
LLAMA = 'engine = "llama_cpp"\nbuild = "0.3.36"\n'

CASES = [
    ('id = "../escape"\n' + TOY, "key 'id'"),
    ('id = "LCP/2"\n' + TOY, "key 'id'"),
    ('id = "a b"\n' + TOY, "key 'id'"),
    ('id = "' + "x" * 300 + '"\n' + TOY, "key 'id'"),
    ('id = "a\\u0000b"\n' + TOY, "key 'id'"),
    ('id = "T"\nengine = "toy"\nbuild = "0.2.0"\n',
     "no build toy-0.2.0 is declared in the engines' builds files (did you mean"),
    ('id = "T"\nmodel = "tiny:abc"\n' + TOY, "key 'model': model 'tiny:abc': the seed after 'tiny:'"),
    ('id = "T"\n' + LLAMA + 'sampling = { temperature = -1.0 }\n', "sampling.temperature"),
    ('id = "T"\n' + LLAMA + 'sampling = { temperature = "1.0" }\n', "sampling.temperature"),
    ('id = "T"\n' + LLAMA + 'drafter = { method = "prompt_lookup", num_pred_tokens = -4 }\n',
     "drafter.num_pred_tokens"),
]


@pytest.mark.parametrize("body, message", CASES, ids=[str(i) for i in range(len(CASES))])
def test_a_bad_campaign_is_refused_before_anything_is_written(tmp_path, capsys, body, message):
    path = tmp_path / "c.toml"
    path.write_text(BASE + body)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err and "Traceback" not in err, err
    assert not out.exists() and not (tmp_path / "escape.json").exists()


def test_unreadable_campaign_files(tmp_path, capsys):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(BASE.encode() + b'id = "caf\xe9"\n')
    assert main(["run", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    assert main(["run", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "is a folder" in capsys.readouterr().err
    good = tmp_path / "c.toml"
    good.write_text(BASE + 'id = "T"\n' + TOY)
    with pytest.raises(SystemExit) as e:
        main(["run", str(good), "--workers", "0"])
    assert e.value.code == 2 and "expected a positive integer, got 0" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
