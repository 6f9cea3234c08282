"""The farm's tiny models (bench/farm_policy.py): the pre-trained policy kept in a cache keyed by
what decides it, copied from there the second time, and pre-trained again when the key changes."""

from bench.farm_policy import pretrained_tiny_models

CORPUS = ["Any tips on garden?", "Soil and water.", "Any tips on music?", "Scales daily."]
ANSWERS = [("Any tips on garden?", "Soil and water."), ("Any tips on music?", "Scales daily.")]


def _weights(policy):
    return (policy / "model.safetensors").read_bytes()


def test_a_second_farm_copies_the_pretrained_policy_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = pretrained_tiny_models(
        tmp_path / "a", CORPUS, ANSWERS, hidden_size=32, steps=2, cache=cache
    )
    second = pretrained_tiny_models(
        tmp_path / "b", CORPUS, ANSWERS, hidden_size=32, steps=2, cache=cache
    )
    assert (first[2], second[2]) == (False, True)
    assert _weights(first[0]) == _weights(second[0])
    assert (second[1] / "config.json").exists()  # the reward model's base came along
    assert len(list(cache.iterdir())) == 1  # one entry, no staging folder left behind


def test_other_steps_are_another_entry_and_no_cache_trains_each_time(tmp_path):
    cache = tmp_path / "cache"
    pretrained_tiny_models(tmp_path / "a", CORPUS, ANSWERS, hidden_size=32, steps=2, cache=cache)
    longer = pretrained_tiny_models(
        tmp_path / "b", CORPUS, ANSWERS, hidden_size=32, steps=3, cache=cache
    )
    assert longer[2] is False and len(list(cache.iterdir())) == 2
    plain = pretrained_tiny_models(tmp_path / "c", CORPUS, ANSWERS, hidden_size=32, steps=2)
    assert plain[2] is False
