"""Engine-native keys judged by the build before the seal: a GBNF grammar parsed by llama.cpp itself."""

from badc_replay.worker import validate


def test_an_invalid_gbnf_grammar_is_refused_before_the_seal():
    def problems(grammar):
        config = {"id": "T", "engine": "llama_cpp", "build": "0.3.36", "role": "probe", "grammar": grammar}
        return validate([config])["T"]["problems"]

    assert problems('root ::= "a" | "b"') == []
    assert any("key 'grammar'" in p for p in problems("root ::= ((("))
    assert any("key 'grammar'" in p for p in problems('start ::= "a"'))  # no rule named root
