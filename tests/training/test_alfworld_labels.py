"""Label and operator rules shared by the environments."""

import pytest

from training.envs.labels import (NO_EFFECT_TEMPLATES, feedback_label, operator_of,
                                  progress_label)


@pytest.mark.parametrize("action,op", [
    ("go to desk 1", "go"), ("take apple 1 from desk 1", "take"), ("put apple 1 in/on desk 1", "put"),
    ("move apple 1 to desk 1", "move"), ("use desklamp 1", "use"), ("Heat egg 1 with microwave 1", "heat"),
    ("  inventory", "inventory"), ("look", "look"), ("jump", "other"), ("", "other"),
])
def test_operator_of(action, op):
    assert operator_of(action) == op


@pytest.mark.parametrize("adm,fb,prog,fl,pl", [
    (True, "You pick up the apple 1 from the desk 1.", True, "valid", "progress"),
    (True, "You are in the middle of a room.", False, "ambiguous", "no_progress"),
    (False, "Nothing happens.", False, "invalid", "invalid"),
    (False, "You pick up the apple 1.", True, "invalid", "invalid"),
    (True, "You are not carrying anything.", True, "invalid", "invalid"),
    (True, "You CANNOT do that.", True, "invalid", "invalid"),
])
def test_labels(adm, fb, prog, fl, pl):
    assert feedback_label(adm, fb, prog) == fl
    assert progress_label(adm, fb, prog) == pl


def test_every_template_makes_invalid():
    for t in NO_EFFECT_TEMPLATES:
        assert feedback_label(True, f"x {t.upper()} y", True) == "invalid"
