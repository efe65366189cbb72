"""Re-scoring stored steps with a checkpoint's weights: what ``rescoring.swap`` and ``rescoring.audit`` share.

A checkpoint ``global_step_N`` of a training run holds ``actor/`` (a Hugging Face folder, LoRA merged),
saved after the update of step N, and ``replay/`` scored during step N, before that update. Re-scoring
with ``actor/`` therefore uses the weights one update later than the stored scores; a collection
(``training.collect``) stores scores of the very weights it names (``meta.json``'s ``checkpoint``). Every
view of a diagnosis is re-scored with the same weights, so realized, swapped and audited scores stay
comparable; :func:`stored_residual_gap` says how far the re-scored residual is from the stored one.

Steps are rendered from the stored context columns (:mod:`ocsd.replay.stored`) exactly as the trainer
rendered them: every view of a step with the same history, shortened to the run's
``max_prompt_length`` when needed (:func:`ocsd.replay.render.render_steps`). Views of a step with its
o_{k+1} replaced by a donor observation (:func:`swapped_record`) keep the history of the realized
rendering.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from diagnostics.load import DiagnosticsError
from diagnostics.options import add_bootstrap_options
from ocsd.records import RecordError, checkpoint_dirs, read_checkpoint, read_run_info
from ocsd.replay.render import RenderedStep, render_steps
from ocsd.replay.views import ReplayView, StepRecord

__all__ = ["Checkpoint", "Rescorer", "checkpoint_weights", "model_weights", "parse_steps", "check_bootstrap",
           "check_out", "check_scorer_tokenizer", "check_weights_flags", "pool_arguments", "rescoring_entry_point",
           "rescoring_parser", "run_checkpoints", "run_label", "run_tokenizer_model", "scoring_device",
           "stored_residual_gap", "swapped_record"]

PAPER_CHECKPOINTS = (10, 50, 100, 150)
"""Checkpoints of the paper's observation-swapping analysis (appendix "Observation-Swapping Sensitivity
Analysis": "we select checkpoints at training steps 10, 50, 100, and 150")."""


@dataclass
class Checkpoint:
    """One checkpoint's stored replay tables and where its weights are.

    Attributes
    ----------
    folder : pathlib.Path
        The ``global_step_N`` folder.
    global_step : int
    steps, tokens : pandas.DataFrame
        Every step row and every token row of the checkpoint.
    meta : dict
        Its ``meta.json``.
    weights : str
        What :func:`ocsd.replay.models.load_model` loads (:func:`checkpoint_weights`).
    """

    folder: Path
    global_step: int
    steps: pd.DataFrame
    tokens: pd.DataFrame
    meta: dict
    weights: str

    @property
    def name(self) -> str:
        return f"{self.folder.parent.name}/{self.folder.name}"


def parse_steps(text: str | None, flag: str = "--ckpt-steps") -> list[int] | None:
    """``"10,50"`` -> ``[10, 50]``; ``None``/``"paper"`` -> ``None`` (the paper's steps that exist).

    Raises
    ------
    DiagnosticsError
        Naming ``flag`` when an item is not a non-negative integer.
    """
    if text is None or text == "paper":
        return None
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit():
            raise DiagnosticsError(f"{flag}: {item!r} is not a global step (comma-separated integers, or 'paper')")
        out.append(int(item))
    return sorted(set(out))


def model_weights(model: str) -> str:
    """``--model`` as weights to load: a Hugging Face folder or a model name as given; an exported warm start (a
    LoRA adapter with ``warm_start.json``, e.g. ``training/warm_starts/smollm2-alfworld``, the weights that scored
    a run's first checkpoint) merged into its base model once (:func:`training.policy.initial_weights`).

    Raises
    ------
    DiagnosticsError
        An exported warm start whose ``warm_start.json`` names no base model.
    """
    path = Path(model)
    if not (path / "adapter_config.json").is_file():
        return model
    from training.policy import initial_weights
    from training.warm_start import resolve_warm_start

    warm = resolve_warm_start(path)
    if not warm.base_model:
        raise DiagnosticsError(f"--model: {path} is a LoRA adapter whose warm_start.json names no base model")
    return str(initial_weights(warm.base_model, warm_start=str(path)))


def checkpoint_weights(folder: Path, meta: Mapping, model: str | None = None) -> str:
    """The weights that re-score a checkpoint: ``model`` when given, else its ``actor/``, else the ``actor/``
    of the checkpoint a collection names in ``meta.json`` (an adapter-only ``actor/`` merged on first use,
    :func:`training.policy.merged_actor`).

    Raises
    ------
    DiagnosticsError
        Naming the folder when there are none.
    """
    if model is not None:
        return model
    from training.policy import has_weights, merged_actor

    candidates = [folder / "actor"] + ([Path(str(meta["checkpoint"])) / "actor"] if meta.get("checkpoint") else [])
    for candidate in candidates:
        if has_weights(candidate):  # an adapter-only actor (save_merged=false) is merged on first use
            return str(merged_actor(candidate, run_settings(candidate.parent.parent)))
    raise DiagnosticsError(f"{folder}: no actor/ weights (the run saved none: save_weights=false) and meta.json names "
                           f"no checkpoint that has them; pass --model PATH to re-score with other weights")


def run_checkpoints(run: str | Path, steps: Sequence[int] | None, *, model: str | None = None,
                    flag: str = "--ckpt-steps", default: str = "paper") -> list[Checkpoint]:
    """The complete checkpoints of ``run`` at the global ``steps`` with their tables and weights.

    ``steps=None`` takes every checkpoint with ``default="all"``; with ``default="paper"`` the paper's
    checkpoints (:data:`PAPER_CHECKPOINTS`) that the run has, or, when it has none of them, every checkpoint
    (with a note on stderr).

    Raises
    ------
    DiagnosticsError
        If ``run`` is not a run folder, a named step has no complete checkpoint (the message lists
        those that exist), or a checkpoint has no weights (:func:`checkpoint_weights`).
    """
    run = Path(run)
    if not run.is_dir():
        raise DiagnosticsError(f"--run: {run} is not a folder")
    available = {step: path for step, path in checkpoint_dirs(run) if (path / "replay" / "meta.json").is_file()}
    if not available:
        raise DiagnosticsError(f"--run: {run} has no complete checkpoint (global_step_N/replay/meta.json)")
    if steps is None:
        chosen = [s for s in PAPER_CHECKPOINTS if s in available] if default == "paper" else sorted(available)
        if not chosen:
            chosen = sorted(available)
            print(f"note: {run} has none of the paper's checkpoints {list(PAPER_CHECKPOINTS)}; using all of its "
                  f"checkpoints {chosen}", file=sys.stderr)
    else:
        absent = [s for s in steps if s not in available]
        if absent:
            raise DiagnosticsError(f"{flag}: {run} has no complete checkpoint at step(s) {absent}; it has "
                                   f"{sorted(available)}")
        chosen = list(steps)
    model = model_weights(model) if model is not None else None
    out = []
    for step in chosen:
        data = read_checkpoint(available[step])
        meta = data.metas[0]
        out.append(Checkpoint(available[step], step, data.steps, data.tokens, meta,
                              checkpoint_weights(available[step], meta, model)))
    return out


def _run_info(run: str | Path) -> dict:
    """The run's ``run.json``, empty when it has none this suite can read."""
    try:
        return read_run_info(Path(run))
    except RecordError:
        return {}


def run_settings(run: str | Path) -> dict:
    """The run's config (``run.json``), empty when it has none this suite can read."""
    config = _run_info(run).get("config")
    return config if isinstance(config, dict) else {}


def run_tokenizer_model(run: str | Path) -> str | None:
    """The model whose tokenizer wrote the run's stored token ids: the scorer of a re-scored run
    (:mod:`rescoring.rescore_run`), else the policy of ``run.json`` (``None`` when it names none)."""
    info = _run_info(run)
    if "rescored_from" in info:
        return str(info["scorer"]) if info.get("scorer") else None
    name = run_settings(run).get("model") or info.get("model")
    return str(name) if name else None


def _scorer_tokenizer(model: str):
    """The tokenizer of ``--model`` (an exported warm start's is its base model's), loaded without the weights."""
    from training.policy import policy_tokenizer

    path = Path(model)
    if (path / "adapter_config.json").is_file() and not (path / "tokenizer_config.json").is_file():
        from training.warm_start import resolve_warm_start

        model = resolve_warm_start(path).base_model or model
    return policy_tokenizer(model)


def check_scorer_tokenizer(run: str | Path, model: str | None) -> None:
    """Refuse a ``--model`` whose tokenizer is not the one the run's stored token ids belong to (their ids would be
    scored as another vocabulary's); only the tokenizers are loaded. Without ``--model`` (each checkpoint's own
    weights) or when the run names no model, there is nothing to compare.

    Raises
    ------
    DiagnosticsError
        Naming ``--model``, the run's model and the command that converts the tokens
        (``python -m rescoring.rescore_run``).
    """
    source = run_tokenizer_model(run) if model is not None else None
    if source is None:
        return
    if _scorer_tokenizer(model).get_vocab() != _scorer_tokenizer(source).get_vocab():
        raise DiagnosticsError(
            f"--model {model}: its tokenizer is not that of {source}, whose token ids {run} stores; convert them "
            f"first with python -m rescoring.rescore_run --run {run} --model {model} --out DIR, then use --run DIR")


def swapped_record(step: StepRecord, donor: str) -> StepRecord:
    """``step`` with o_{k+1} replaced by ``donor``: history, o_k, a_{k+1}, o_{k+2} and the response unchanged."""
    if not step.future_obs:
        raise ValueError(f"step {step.key}: no o_{{k+1}} to replace")
    return replace(step, future_obs=(donor, *step.future_obs[1:]), donor_obs=None)


class Rescorer:
    """Renders stored steps under views and scores their response tokens with one model.

    Parameters
    ----------
    weights : str
        A Hugging Face folder (a checkpoint's ``actor/``) or ``smollm2``.
    env : str
        The checkpoints' environment.
    max_prompt_length : int or None
        The run's prompt limit: histories are shortened as the trainer shortened them.
    device, dtype : str
        Where and in which precision to score.
    token_budget : int, optional
        Padded tokens per forward batch (:class:`ocsd.replay.scoring.ReplayScorer`).
    cache : rescoring.score_cache.ScoreCache, optional
        Where :meth:`score` keeps what it computed, and finds what an earlier call computed on the same items with
        the same weights and settings.
    """

    def __init__(self, weights: str, *, env: str, max_prompt_length: int | None, device: str = "cpu",
                 dtype: str = "float32", token_budget: int | None = None, cache=None):
        from ocsd.replay.models import load_model, load_tokenizer
        from ocsd.replay.prompts import PromptRenderer
        from ocsd.replay.scoring import ReplayScorer

        self.weights, self.env, self.max_prompt_length = weights, env, max_prompt_length
        self.device, self.dtype = device, dtype
        self.tokenizer = load_tokenizer(weights)
        model = load_model(weights, device=device, dtype=dtype)
        self.renderer = PromptRenderer(self.tokenizer)
        self.scorer = ReplayScorer(model, token_budget=token_budget, progress=False)
        self.cache = cache

    def render(self, records: Sequence[StepRecord], views: Sequence[ReplayView]
               ) -> tuple[list[RenderedStep], list[str]]:
        """Render every record under ``views`` with one history per step (as the trainer did).

        Returns
        -------
        rendered : list of RenderedStep
            In record order, without the steps that could not be rendered.
        skipped : list of str
            Why each other step could not be rendered.
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the skipped steps are returned and reported
            rendered, skipped = render_steps(list(records), list(views), self.renderer, self.max_prompt_length)
        return [r for _, r in rendered], [s.reason for s in skipped]

    def contexts(self, records: Sequence[StepRecord], view: ReplayView) -> list[list[int]]:
        """Prompt ids of each record under ``view`` with the record's history as it is (no shortening)."""
        rendered, skipped = render_steps(list(records), [view], self.renderer, None)
        if skipped:
            raise DiagnosticsError(f"view {view.name!r} cannot render step {skipped[0].key}: {skipped[0].reason}")
        return [r.contexts[view.name] for _, r in rendered]

    def score(self, contexts: Sequence[Mapping[str, Sequence[int]]], responses: Sequence[Sequence[int]], *,
              keys: Sequence[str] | None = None, progress: bool = True, desc: str = "re-scoring"
              ) -> list[dict[str, np.ndarray]]:
        """Log-probs of each response under each of its contexts (view name -> ids), shape ``(T,)`` each; read from
        :attr:`cache` where an earlier call scored the same items with the same weights and settings."""
        from ocsd.replay.scoring import ScoreItem

        key = None
        if self.cache is not None:
            from rescoring.score_cache import weights_fingerprint

            settings = (weights_fingerprint(self.weights), str(self.dtype), str(self.scorer.device.type),
                        str(self.scorer.token_budget))
            key = self.cache.key(settings, contexts, responses)
            kept = self.cache.load(key, contexts)
            if kept is not None:
                return kept
        items = [ScoreItem(ctx, resp, key=None if keys is None else keys[i])
                 for i, (ctx, resp) in enumerate(zip(contexts, responses))]
        scored = self.scorer.score(items, progress=progress, desc=desc)
        if key is not None:
            self.cache.save(key, scored)
        return scored


def stored_residual_gap(tokens: pd.DataFrame, rescored: Mapping[tuple[str, int], np.ndarray]) -> float:
    """Largest |stored step mean e - re-scored step mean e| over the re-scored steps (nan when none).

    Parameters
    ----------
    tokens : pandas.DataFrame
        The checkpoint's token rows (``logp_full``, ``logp_ablated``).
    rescored : mapping
        ``(traj_uid, step_idx) -> re-scored token residuals``.
    """
    if not rescored:
        return float("nan")
    e = tokens.assign(_e=tokens["logp_full"].astype(np.float64) - tokens["logp_ablated"].astype(np.float64))
    stored = e.groupby(["traj_uid", "step_idx"])["_e"].mean()
    gaps = [abs(float(stored.loc[key]) - float(np.mean(values))) for key, values in rescored.items()]
    return float(max(gaps))


def scoring_device(device: str | None, settings: Mapping) -> str:
    """``device`` (checked), else the run's device when it is available, else ``cpu``.

    Raises
    ------
    DiagnosticsError
        When ``device`` names CUDA on a machine without it.
    """
    import torch

    if device is not None:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise DiagnosticsError(f"--device {device}: CUDA is not available on this machine")
        return device
    wanted = str(settings.get("device") or "cpu")
    return wanted if not wanted.startswith("cuda") or torch.cuda.is_available() else "cpu"


def checkpoint_rescorers(run: str | Path, ckpts: Sequence[Checkpoint], *, device: str | None = None,
                         dtype: str | None = None, cache=None) -> Iterator[tuple[Checkpoint, "Rescorer"]]:
    """Each checkpoint with a :class:`Rescorer` of its weights, set up from the run's ``run.json``: its prompt
    limit and token budget, and its device (:func:`scoring_device`) and dtype unless given; ``cache`` (a
    :class:`rescoring.score_cache.ScoreCache`) keeps their scores. A model is loaded again only when the weights
    change from one checkpoint to the next."""
    settings = run_settings(run)
    device, dtype = scoring_device(device, settings), dtype or str(settings.get("dtype") or "float32")
    rescorer = None
    for ckpt in ckpts:
        if rescorer is None or rescorer.weights != ckpt.weights:
            rescorer = Rescorer(ckpt.weights, env=str(ckpt.meta["env"]),
                                max_prompt_length=settings.get("max_prompt_length"), device=device, dtype=dtype,
                                token_budget=settings.get("scoring_token_budget"), cache=cache)
        yield ckpt, rescorer


OWN_WEIGHTS = "each checkpoint's own actor/"  # a result's "model" when no --model replaced the checkpoints' weights


def weights_label(ckpt: Checkpoint, model: str | None) -> str:
    """What re-scored ``ckpt``, as a result file names it: ``model`` when given, else the checkpoint's ``actor/``
    (not the cache folder an adapter-only ``actor/`` is merged into, which means nothing to a reader)."""
    return model if model is not None else str(ckpt.folder / "actor")


def run_label(run: str | Path) -> str:
    """The run's name from ``run.json``, else its folder name."""
    return str(_run_info(run).get("run") or Path(run).name)


def rescoring_parser(prog: str, description: str, *, ckpt_help: str) -> argparse.ArgumentParser:
    """The options of the re-scoring commands: ``--run``, ``--ckpt-steps``, the swap's ``--donors``,
    ``--per-category`` and ``--donor-text``, the weights' ``--model``, ``--device`` and ``--dtype``,
    ``--no-progress``, the bootstrap options and ``--json``."""
    from diagnostics.options import add_bootstrap_options
    from ocsd.cli import Once, positive_int

    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=description)
    p.add_argument("--run", required=True, action=Once, metavar="DIR", help="run folder with actor checkpoints")
    p.add_argument("--ckpt-steps", default=None, metavar="N,N,...", help=ckpt_help)
    swap = p.add_argument_group("observation swap")
    swap.add_argument("--donors", type=positive_int("--donors"), default=5, help="donor observations per step (5)")
    swap.add_argument("--per-category", type=positive_int("--per-category"), default=40,
                      help="evaluation steps per category and checkpoint at most (40)")
    swap.add_argument("--donor-text", choices=("any", "differ"), default="any",
                      help="any (default, the appendix's sampling): donors as drawn, possibly reading like the "
                           "step's own o_{k+1}; differ: only donors whose text differs from it")
    weights = p.add_argument_group("weights")
    weights.add_argument("--model", default=None,
                         help="re-score with these weights instead of each checkpoint's actor/")
    weights.add_argument("--device", default=None, help="cpu or cuda (default: the run's device when available)")
    weights.add_argument("--dtype", default=None, help="float32, bfloat16, ... (default: the run's dtype)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    add_bootstrap_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    return p


def _weights_errors() -> tuple[type[BaseException], ...]:
    from ocsd.replay.models import ModelNotFoundError  # loads torch: only when a command runs

    return (ModelNotFoundError,)


def rescoring_entry_point(body, prog: str):
    """The ``main(argv=None)`` of a re-scoring command (:func:`ocsd.cli.entry_point`); weights that cannot be found
    exit 2 as well."""
    from ocsd.cli import entry_point

    return entry_point(body, prog, errors=_weights_errors)


def check_weights_flags(args: argparse.Namespace) -> None:
    """Refuse a ``--device`` that is not ``cpu``, ``cuda`` or ``cuda:N`` of this machine and a ``--dtype`` that is
    not a floating-point dtype, before any model is loaded.

    Raises
    ------
    DiagnosticsError
        Naming the flag.
    """
    from ocsd.replay.models import resolve_dtype
    from training.config import device_problem

    if args.device is not None:
        why = device_problem(args.device)
        if why is not None:
            raise DiagnosticsError(f"--device {args.device}: {why}")
    if args.dtype is not None:
        try:
            resolve_dtype(args.dtype)
        except ValueError as exc:
            raise DiagnosticsError(f"--dtype: {exc}") from None


def check_out(out: str | Path, flag: str = "--out") -> Path:
    """``out`` as a path, once it is known to be a folder that can be written (created if missing).

    Raises
    ------
    DiagnosticsError
        Naming ``flag`` when it or a folder above it is a file, or it cannot be written.
    """
    from ocsd.cli import folder_problem

    problem = folder_problem(out, write=True)
    if problem:
        raise DiagnosticsError(f"{flag}: {problem}")
    return Path(out)


def pool_arguments(argv: Sequence[str] | None, prog: str, description: str, *, metavar: str, command: str,
                   result: str) -> tuple[argparse.Namespace, Path]:
    """The parsed command line of a command that pools the ``--out`` folders of ``command`` (``rescoring.swap_pool``,
    ``rescoring.audit_pool``): the folders (``args.inputs``), ``--out`` (checked and returned), the bootstrap options
    (checked) and ``--json``."""
    from ocsd.cli import output_folder

    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("inputs", nargs="+", metavar=metavar, help=f"a {command} --out folder (two or more)")
    p.add_argument("--out", type=output_folder, required=True, help=f"output folder of the pooled {result}")
    add_bootstrap_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    args = p.parse_args(argv)
    check_bootstrap(args)
    return args, check_out(args.out)


def check_bootstrap(args: argparse.Namespace) -> None:
    """Refuse ``--n-boot`` < 1 and ``--ci`` outside (0, 1)."""
    if args.n_boot < 1 or not 0 < args.ci < 1:
        raise DiagnosticsError(f"--n-boot must be >= 1 and --ci in (0, 1); got {args.n_boot} and {args.ci}")
