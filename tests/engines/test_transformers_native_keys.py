"""Engine-native keys judged by the build before the seal: SynthID's config and a draft model's path."""

from badc_replay.worker import validate

BASE = {"engine": "transformers", "build": "5.17.0", "role": "probe"}


def _problems(**config):
    return validate([{**BASE, "id": "T", **config}])["T"]["problems"]


def test_synthid_config_keys_types_and_paths_are_refused_with_the_nearest_valid_key():
    wm = {"type": "synthid", "keys": [1, 2], "ngram_len": 2}
    assert _problems(generation={"watermarking_config": wm}) == []
    assert any("'generation.watermarking_config.kyes'" in p and "'keys'" in p
               for p in _problems(generation={"watermarking_config": {"type": "synthid", "kyes": [1], "ngram_len": 2}}))
    assert any("did you mean 'ngram_len'" in p for p in _problems(
        generation={"watermarking_config": {"type": "synthid", "keys": [1], "ngram_length": 2}}))
    negative = {**wm, "ngram_len": -2}
    assert any("an integer >= 1, got -2" in p for p in _problems(generation={"watermarking_config": negative}))
    misspelled = {**wm, "type": "synthidd"}
    assert any("did you mean 'synthid'" in p for p in _problems(generation={"watermarking_config": misspelled}))
    assert any("key 'drafter.model'" in p and "/nonexistent/model" in p
               for p in _problems(drafter={"method": "draft_model", "model": "/nonexistent/model"}))
