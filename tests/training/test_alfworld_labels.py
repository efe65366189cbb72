"""Label and operator rules of the ALFWorld entry (its registry ``labels``)."""

import pytest

from ocsd.environments import get_environment
from ocsd.environments.labels import NO_EFFECT_TEMPLATES, StepLabels
from ocsd.records import FEEDBACK_LABELS, PROGRESS_LABELS

LABELS = get_environment("alfworld").labels


@pytest.mark.parametrize("action,op", [
    ("go to desk 1", "go"), ("take apple 1 from desk 1", "take"), ("put apple 1 in/on desk 1", "put"),
    ("move apple 1 to desk 1", "move"), ("use desklamp 1", "use"), ("Heat egg 1 with microwave 1", "heat"),
    ("  inventory", "inventory"), ("look", "look"), ("jump", "other"), ("", "other"),
])
def test_operator_of(action, op):
    assert LABELS.operator_of(action) == op


@pytest.mark.parametrize("adm,fb,prog,fl,pl", [
    (True, "You pick up the apple 1 from the desk 1.", True, "valid", "progress"),
    (True, "You are in the middle of a room.", False, "ambiguous", "no_progress"),
    (False, "Nothing happens.", False, "invalid", "invalid"),
    (False, "You pick up the apple 1.", True, "invalid", "invalid"),
    (True, "You are not carrying anything.", True, "invalid", "invalid"),
    (True, "You CANNOT do that.", True, "invalid", "invalid"),
])
def test_labels(adm, fb, prog, fl, pl):
    assert LABELS.feedback_label(adm, fb, prog) == fl
    assert LABELS.progress_label(adm, fb, prog) == pl
    assert fl in FEEDBACK_LABELS and pl in PROGRESS_LABELS


def test_every_template_makes_invalid():
    assert LABELS.no_effect_templates == NO_EFFECT_TEMPLATES
    for t in NO_EFFECT_TEMPLATES:
        assert LABELS.feedback_label(True, f"x {t.upper()} y", True) == "invalid"


def test_step_labels_validation():
    with pytest.raises(ValueError, match="lower-case"):
        StepLabels(operators=("Go",))
    with pytest.raises(ValueError, match="no_effect_templates"):
        StepLabels(no_effect_templates=["nothing happens"])
    assert StepLabels().operator_of("go to desk 1") == "other"
