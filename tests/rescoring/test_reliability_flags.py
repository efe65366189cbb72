"""``rescoring.swap`` and ``rescoring.audit`` refuse a bad ``--device``, ``--dtype`` or output folder in one line,
before any model is loaded (a real run of the tiny model, :mod:`acting`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rescoring import audit as audit_mod
from rescoring import ladder as ladder_mod
from rescoring import rescore_run as rescore_run_mod
from rescoring import swap as swap_mod

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture()
def no_model(monkeypatch):
    """Fail a test whose command loads a model: its refusal must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("ocsd.replay.models.load_model", refuse)
    monkeypatch.setattr("ocsd.replay.models.load_tokenizer", refuse)


COMMANDS = {"swap": (swap_mod.main, []), "audit": (audit_mod.main, ["--view", "one_obs", "--no-swap"])}
# the commands that load a scorer of their own take the same two flags
WEIGHTS_COMMANDS = {**COMMANDS, "ladder": (ladder_mod.main, ["--model", "tiny"]),
                    "rescore_run": (rescore_run_mod.main, ["--model", "tiny"])}


@pytest.mark.parametrize("command", sorted(WEIGHTS_COMMANDS))
@pytest.mark.parametrize("flags, message", [
    (["--device", "banana"], "error: --device banana: must be 'cpu', 'cuda' or 'cuda:N'"),
    (["--dtype", "int8"], "error: --dtype: unknown dtype 'int8'"),
])
def test_bad_device_or_dtype_is_one_line_before_any_model(frozen_run, command, flags, message, no_model, tmp_path,
                                                          capsys):
    main, extra = WEIGHTS_COMMANDS[command]
    assert main(["--run", str(frozen_run), "--no-progress", "--out", str(tmp_path / "out"), *extra, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_out_folder_that_cannot_be_written_is_refused_before_any_model(frozen_run, command, no_model, capsys):
    main, extra = COMMANDS[command]
    unwritable = Path("/proc/self")  # takes no new files, whoever asks (the superuser included)
    with pytest.raises(SystemExit) as exit_info:
        main(["--run", str(frozen_run), "--no-progress", "--out", str(unwritable / "out"), *extra])
    assert exit_info.value.code == 2
    assert f"argument --out: {unwritable} cannot be written" in capsys.readouterr().err


@pytest.mark.skipif(AS_ROOT, reason="the superuser writes into read-only folders")
@pytest.mark.parametrize("command, default", [("swap", "RUN/swap"), ("audit", "RUN/audit_one_obs")])
def test_a_read_only_run_without_out_is_refused_before_any_model(frozen_run, tmp_path, command, default, no_model,
                                                                 capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(frozen_run, run)
    run.chmod(0o555)
    main, extra = COMMANDS[command]
    try:
        assert main(["--run", str(run), "--no-progress", *extra]) == 2
    finally:
        run.chmod(0o755)
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out (default {default}): {run} cannot be written") and err.count("\n") == 1


@pytest.mark.parametrize("command", ["swap", "audit", "rescore_run"])
def test_a_second_run_is_refused_not_silently_kept(frozen_run, command, no_model, tmp_path, capsys):
    """These commands read one run: ``--run A --run B`` kept only B without a word."""
    main, extra = WEIGHTS_COMMANDS[command]
    with pytest.raises(SystemExit) as exit_info:
        main(["--run", str(frozen_run), "--run", str(tmp_path), "--no-progress", "--out", str(tmp_path / "out"),
              *extra])
    assert exit_info.value.code == 2
    assert f"--run is given twice ({frozen_run} and {tmp_path})" in capsys.readouterr().err
