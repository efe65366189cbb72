"""Word merging and functional roles."""

import numpy as np
import pytest

from diagnostics.roles import ROLES, assign_roles, get_lexicon
from diagnostics.words import segment_words, word_means, word_type
from ocsd.environments import environment_names, get_environment
from ocsd.environments.alfworld import alfworld_vocabulary


def words_of(pieces):
    spans = segment_words(pieces, np.zeros(len(pieces), dtype=int))
    return spans, spans.text


def test_subwords_merge_and_tags_split():
    pieces = ["<", "reason", ">", "I", " see", " a", " mu", "g", " 1", ".</", "reason", ">", "\n", "<action>",
              " take", " mug", " 1", "</", "action", "><|im_end|>"]
    spans, text = words_of(pieces)
    assert text == ["<reason>", "I", "see", "a", "mug", "1.", "</reason>", "<action>", "take", "mug", "1",
                    "</action>", "<|im_end|>"]
    # "mug" is the two pieces " mu" + "g"; ".</" belongs to both "1." and "</reason>"
    assert (spans.first[4], spans.last[4]) == (6, 7)
    assert (spans.first[5], spans.last[5]) == (8, 9)
    assert (spans.first[6], spans.last[6]) == (9, 11)
    assert (spans.first[-1], spans.last[-1]) == (19, 19)  # "><|im_end|>" spans two words
    assert (spans.first[-2], spans.last[-2]) == (17, 19)
    assert 12 not in set(np.concatenate([np.arange(a, b + 1) for a, b in zip(spans.first, spans.last)]))


def test_words_never_cross_steps_and_non_tags_stay():
    spans = segment_words(["a", "b", "c", "x<5"], np.array([0, 0, 1, 1]))
    assert list(spans.step) == [0, 1]
    assert spans.text == ["ab", "cx<5"]
    with pytest.raises(ValueError, match="contiguous"):
        segment_words(["a", "b", "c"], np.array([0, 1, 0]))


def test_word_means_against_brute_force():
    rng = np.random.default_rng(0)
    vocab = [" the", "re", " mug", "<", "action", ">", " ", "\n", "1", ",", " go", "</", "x"]
    pieces = list(rng.choice(vocab, 300))
    steps = np.repeat(np.arange(30), 10)
    values = rng.normal(size=(300, 2))
    spans = segment_words(pieces, steps)
    got = word_means(values, spans)
    for w in range(len(spans)):
        ref = values[spans.first[w]:spans.last[w] + 1].mean(axis=0)
        assert np.allclose(got[w], ref)
        joined = "".join(pieces[spans.first[w]:spans.last[w] + 1])
        assert spans.text[w] in joined


def test_word_type():
    assert word_type("Mug,") == "mug"
    assert word_type("</Action>") == "</action>"
    assert word_type("...") == "..."


def roles_of(words, env="alfworld"):
    codes = assign_roles(words, np.zeros(len(words), dtype=int), lexicon=get_lexicon(env))
    return [ROLES[c] for c in codes]


def test_role_priority_and_rules():
    words = ["<reason>", "Action:", "**", "take", "mug", "1", "because", "open", "it", "hot", "3", "</action>"]
    assert roles_of(words) == ["Format", "Format", "Format", "Action", "Entity/State", "Entity/State", "Reasoning",
                               "Action", "Other", "Entity/State", "Other", "Format"]


def test_alfworld_lexicon_has_engine_vocabulary():
    vocab, source = alfworld_vocabulary()
    assert source in ("alfworld", "built-in")
    for w in ("countertop", "sinkbasin", "desklamp", "mug", "mugs", "knives", "cabinet", "fridge", "counter"):
        assert w in vocab
    assert "can" not in vocab


def test_searchqa_argument_tags_and_proper_nouns():
    words = ["I", "need", "Paris.", "<search>", "capital", "of", "France", "</search>", "Then", "Obama", "said"]
    assert roles_of(words, "searchqa") == ["Other", "Other", "Entity/State", "Format", "Entity/State", "Entity/State",
                                           "Entity/State", "Format", "Reasoning", "Entity/State", "Other"]


@pytest.mark.parametrize("env", environment_names())
def test_lexicon_comes_from_the_environment_spec(env):
    spec = get_environment(env)
    assert get_lexicon(env) == spec.lexicon()
    assert get_lexicon(env).env == env
    for alias in spec.aliases:
        assert get_lexicon(alias.upper()) == spec.lexicon()


def test_unknown_env_warns():
    with pytest.warns(UserWarning, match="no functional-role lexicon"):
        lex = get_lexicon("minecraft")
    assert not lex.actions
