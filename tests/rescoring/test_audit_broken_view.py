"""``python -m rescoring.audit`` with a user's view that is broken (its ``render`` raises, returns text instead of
token ids, or its ``evidence`` is not text): one line naming the view, exit status 2, nothing written."""

from __future__ import annotations

import pytest

from rescoring import audit as audit_mod
from ocsd.replay.views import FullView


class RendersText(FullView):
    name = "renders_text"

    def render(self, step, renderer):
        return "Observation: " + step.future_obs[0]

    render_view = None  # an ids-only view: render alone is called


class Raises(FullView):
    name = "raises"

    def evidence(self, step):
        return [("observation", step.future_obs[7])]


class NumberEvidence(FullView):
    name = "number_evidence"

    def evidence(self, step):
        return [("observation", len(step.future_obs))]


@pytest.mark.parametrize("view, message", [
    ("RendersText", "view 'renders_text' on step "),
    ("Raises", "view 'raises' on step "),
    ("NumberEvidence", "view 'number_evidence' on step "),
])
def test_audit_of_a_broken_view_is_one_line_naming_it(frozen_run, tmp_path, capsys, view, message):
    out = tmp_path / "audit"
    code = audit_mod.main(["--run", str(frozen_run), "--view", f"{__file__}:{view}", "--ckpt-steps", "1",
                           "--donors", "2", "--per-category", "3", "--n-boot", "20", "--no-progress",
                           "--out", str(out)])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and "Traceback" not in err, err
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1] and message in errors[0], err
    assert not out.exists()
