"""``python -m training.envs.alfworld``: a negative ``--seed`` and a ``list --data`` folder without games are
refused in one ``error:`` line with exit status 2, before anything is written; a folder of games still lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.envs.alfworld.__main__ import main


def test_a_negative_seed_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "games"
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--out", str(out), "--n", "1", "--seed", "-1", "--split", "train"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--seed" in err[-1] and ">= 0" in err[-1] and "Traceback" not in "\n".join(err)
    assert not out.exists()


def test_list_of_a_folder_without_games_is_an_error_naming_it(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a game\n")
    assert main(["list", "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --data") and str(tmp_path) in err[0]


def test_list_of_a_games_folder_lists_them(alfworld_games: Path, capsys):
    assert main(["list", "--data", str(alfworld_games)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.strip().splitlines()) == 4 and "4 solvable games" in captured.err
