"""``python -m figures`` checks every flag before it draws anything (synthetic runs, test input only)."""

from figures.__main__ import main


def test_bad_paper_reference_refused_before_any_figure(runs, tmp_path, capsys):
    out = tmp_path / "figs"
    assert main(["--run", str(runs["ocsd0"]), "--out", str(out), "--n-boot", "10", "--paper-reference", "GPT-5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--paper-reference" in err and "GPT-5" in err
    assert not out.exists() or not any(out.iterdir())
