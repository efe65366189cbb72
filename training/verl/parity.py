"""One verl batch through both trainers: ``python -m training.verl.parity RUN [--step N] [--weights DIR]``.

With ``ocsd.keep_batch=true`` the OCSD trainer (:class:`training.verl.trainer.OCSDTrainer`) keeps what it read and
wrote at each checkpoint step in ``RUN/batches/global_step_N.pt`` (:func:`keep_batch`): the batch's rows (prompt and
response ids, the agent loop's ``extra_fields``), verl's old log-probs, what the actor's ``compute_log_prob``
returned for every replay-view row, and the token advantages it stored. This command then answers two questions
about that batch:

``verl``
    Recomputed from the kept inputs (old log-probs and view scores as verl computed them) with
    :func:`training.verl.batch.batch_advantages`, do the advantages equal the stored ones? They must, bit for bit:
    the rows were read back and written by key, none lost or misplaced.
``single-device``
    The single-device trainer's computation of the same batch (:func:`single_device_advantages`): old log-probs by
    a plain forward of the step's weights, the selection from them, the Full and Ablated views rendered again from
    the rebuilt trajectories and scored by :class:`ocsd.replay.scoring.ReplayScorer`, then the method's advantages.
    Printed beside verl's: the largest and mean token differences of the old log-probs, the view scores and the
    advantages, how many selected steps agree, whether the agent loop's pre-rendered view ids equal the renderer's,
    and the share of tokens whose advantage keeps its sign. The log-probs of two implementations differ by their
    rounding (verl's actor computes in bfloat16), so these differences are not zero; the recomputation must be.

The weights of step N are those before its update: the run's initial weights for step 1 (``model`` of
``run.json``), otherwise a Hugging Face folder named with ``--weights``. ``--groups N`` compares the first N task
groups only (the advantages of a group depend on that group alone), for a check on a CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ocsd.algorithm.methods import MethodSpec, TokenInputs, get_method
from ocsd.records import RUN_FILE, read_run_info
from training.config import TrainConfig, make_config
from training.pipeline import BatchStatistics, forward_scoring, step_advantages
from training.replay import ReplayScores, step_record
from training.rollout.loop import StepSample, Trajectory
from training.verl.batch import StepRow, ViewRequest, batch_advantages, trajectories_of_rows

__all__ = ["KeptBatch", "SingleDevice", "batch_path", "compare", "first_groups", "keep_batch", "main",
           "read_kept_batch", "recompute", "single_device_advantages"]

BATCH_FOLDER = "batches"
"""Folder of a run that holds the kept batches."""


def batch_path(run_dir: str | Path, step: int) -> Path:
    """Where the batch of ``step`` is kept: ``RUN/batches/global_step_<step>.pt``."""
    return Path(run_dir) / BATCH_FOLDER / f"global_step_{int(step)}.pt"


@dataclass
class KeptBatch:
    """What the verl trainer read and wrote at one step.

    Attributes
    ----------
    step : int
    views : list of str
        The replay views scored (``full``/``ablated``; ``teacher`` for methods with a privileged teacher).
    rows : list of StepRow
        The batch (verl's padding rows left out).
    old_logp : dict of str to numpy.ndarray
        verl's old log-probs of each row's response.
    scores : dict of (str, str) to numpy.ndarray
        The actor's log-probs of each (row key, view) it scored.
    advantages : dict of str to numpy.ndarray
        The token advantages stored for each row.
    """

    step: int
    views: list[str]
    rows: list[StepRow]
    old_logp: dict[str, np.ndarray]
    scores: dict[tuple[str, str], np.ndarray]
    advantages: dict[str, np.ndarray]


def keep_batch(path: str | Path, kept: KeptBatch) -> Path:
    """Write ``kept`` to ``path`` (a temporary file renamed into place, so a reader never sees half of it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"step": int(kept.step), "views": list(kept.views),
               "rows": [(r.key, list(r.prompt_ids), list(r.response_ids), dict(r.extra)) for r in kept.rows],
               "old_logp": {k: np.asarray(v, np.float32) for k, v in kept.old_logp.items()},
               "scores": {f"{k}|{v}": np.asarray(x, np.float32) for (k, v), x in kept.scores.items()},
               "advantages": {k: np.asarray(v, np.float32) for k, v in kept.advantages.items()}}
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path


def read_kept_batch(path: str | Path) -> KeptBatch:
    """The batch kept in ``path``.

    Raises
    ------
    FileNotFoundError
        No such file (with the setting that writes it).
    ValueError
        A file that is not a kept batch (the missing field named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no kept batch; run verl with ocsd.keep_batch=true to keep the batch of "
                                "every checkpoint step")
    payload = torch.load(path, map_location="cpu", weights_only=False)  # the suite's own file
    missing = [k for k in ("step", "views", "rows", "old_logp", "scores", "advantages") if k not in payload]
    if missing:
        raise ValueError(f"{path}: not a kept batch (missing {missing})")
    scores = {}
    for name, value in payload["scores"].items():
        key, view = name.rsplit("|", 1)
        scores[(key, view)] = value
    return KeptBatch(int(payload["step"]), list(payload["views"]), [StepRow(*row) for row in payload["rows"]],
                     dict(payload["old_logp"]), scores, dict(payload["advantages"]))


def first_groups(kept: KeptBatch, n: int) -> KeptBatch:
    """The kept batch restricted to its first ``n`` task groups (by group id).

    The advantages of a group's rows depend on that group alone (GRPO normalises within a group; the top-rho
    selection is per trajectory), so the restriction changes none of them. With random selection the draw depends
    on the whole batch: :func:`main` refuses ``--groups`` for such methods.

    Raises
    ------
    ValueError
        ``n`` < 1.
    """
    if n < 1:
        raise ValueError(f"--groups {n}: name at least one group")
    groups = sorted({str(r.extra.get("ocsd_group_uid")) for r in kept.rows})[:n]
    rows = [r for r in kept.rows if str(r.extra.get("ocsd_group_uid")) in groups]
    keys = {r.key for r in rows}
    return KeptBatch(kept.step, kept.views, rows, {k: v for k, v in kept.old_logp.items() if k in keys},
                     {k: v for k, v in kept.scores.items() if k[0] in keys},
                     {k: v for k, v in kept.advantages.items() if k in keys})


def recompute(kept: KeptBatch, cfg: TrainConfig, spec: MethodSpec,
              teacher_context: Callable[[Trajectory, StepSample], list[int]] | None = None) -> dict[str, np.ndarray]:
    """The token advantages of the kept batch from its kept inputs, by :func:`training.verl.batch.batch_advantages`.

    Raises
    ------
    KeyError
        A view score the computation asks for was not kept.
    """
    def kept_scores(requests: Sequence[ViewRequest]) -> dict[tuple[str, str], np.ndarray]:
        return {(r.key, r.view): kept.scores[(r.key, r.view)] for r in requests}

    views = [v for v in kept.views if v != "teacher"]
    result = batch_advantages(kept.rows, kept.old_logp, spec=spec, cfg=cfg, step=kept.step, score=kept_scores,
                              teacher_context=teacher_context or (lambda traj, step: []), views=views)
    return {k: v.numpy() for k, v in result.advantages.items()}


@dataclass
class SingleDevice:
    """The single-device trainer's quantities of a batch, rows in (trajectory, step) order.

    Attributes
    ----------
    keys : list of (int, int)
    stats : training.pipeline.BatchStatistics
        Old log-probs, rewards, GRPO advantages, step NLL and the selection.
    scores : training.replay.ReplayScores
    inputs : ocsd.algorithm.methods.TokenInputs
    advantages : torch.Tensor
        (steps, tokens) token advantages, zero past each response.
    """

    keys: list
    stats: BatchStatistics
    scores: ReplayScores
    inputs: TokenInputs
    advantages: torch.Tensor = field(repr=False)


def single_device_advantages(trajs: Sequence[Trajectory], model, renderer, *, spec: MethodSpec, cfg: TrainConfig,
                             step: int, views: Sequence[str] | None = None,
                             teacher_context: Callable[[Trajectory, StepSample], list[int]] | None = None
                             ) -> SingleDevice:
    """The method's token advantages of ``trajs`` as :meth:`training.trainer.Trainer.train_step` computes them
    (:func:`training.pipeline.step_advantages`) with ``model`` as the old policy: old log-probs, statistics and
    selection, the selected steps' views rendered by ``renderer`` and scored by the replay scorer, the teacher's
    log-probs (baselines), then the advantages.

    ``views`` are the replay views to score (default: the method's); ``teacher_context`` builds the privileged
    teacher's prompt of a step (required by methods with one).
    """
    from ocsd.replay.scoring import ReplayScorer, response_logprobs

    if spec.privileged_teacher and teacher_context is None:
        raise ValueError(f"method {spec.name!r} needs the privileged teacher's prompts: pass teacher_context")
    budget = cfg.scoring_token_budget

    def logprobs(pairs):  # as training.policy.Policy.logprobs
        logp, mask = response_logprobs(model, pairs, padded=True, token_budget=budget)
        return logp.float().cpu(), mask.cpu()

    score = forward_scoring(trajs, list(spec.replay_views if views is None else views),
                            scorer=ReplayScorer(model, token_budget=budget, progress=False), renderer=renderer,
                            logprobs=logprobs, teacher_context=teacher_context if spec.privileged_teacher else None,
                            env_name=cfg.env, max_prompt_length=cfg.max_prompt_length)
    result = step_advantages(trajs, spec=spec, cfg=cfg, step=step, old_logprobs=logprobs, score=score)
    return SingleDevice(result.stats.keys, result.stats, result.scores, result.inputs, result.token_adv)


def _differences(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    if not pairs:
        return {"tokens": 0, "max_abs": float("nan"), "mean_abs": float("nan")}
    diff = np.concatenate([np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)) for a, b in pairs])
    return {"tokens": int(diff.size), "max_abs": float(diff.max(initial=0.0)), "mean_abs": float(diff.mean())}


def compare(kept: KeptBatch, cfg: TrainConfig, model, tokenizer) -> dict:
    """The report of the module docstring for ``kept``, with ``model`` as the step's old policy.

    Returns
    -------
    dict
        ``verl_recomputed`` (largest token difference of the recomputed advantages, 0 when they are equal),
        ``old_logp``, ``view_scores``, ``advantages`` (``tokens``, ``max_abs``, ``mean_abs`` and, for the
        advantages, ``sign_agreement``), ``selection`` (counts and overlap) and ``view_ids`` (selected steps whose
        pre-rendered Full and Ablated ids equal the renderer's).
    """
    from ocsd.replay.prompts import PromptRenderer
    from ocsd.replay.render import render_steps
    from training.teachers import teacher_context

    spec = get_method(cfg.method)
    context = teacher_context(tokenizer, cfg.env, cfg.max_prompt_length)
    again = recompute(kept, cfg, spec, context)
    exact = max((float(np.abs(again[k] - kept.advantages[k]).max(initial=0.0)) for k in kept.advantages),
                default=0.0)
    trajs, where = trajectories_of_rows(kept.rows)
    key_of = {tk: key for key, tk in where.items()}
    views = [v for v in kept.views if v != "teacher"]
    renderer = PromptRenderer(tokenizer)
    ref = single_device_advantages(trajs, model, renderer, spec=spec, cfg=cfg, step=kept.step, views=views,
                                   teacher_context=context)
    lengths = ref.stats.mask.sum(dim=1).tolist()
    rows_of = list(enumerate(zip(ref.keys, lengths)))
    old = [(kept.old_logp[key_of[tk]], ref.stats.old_logp[i, :n].numpy()) for i, (tk, n) in rows_of]
    ours = {key_of[tk]: ref.advantages[i, :n].numpy() for i, (tk, n) in rows_of}
    adv_pairs = [(kept.advantages[k], ours[k]) for k in ours]
    signs = np.concatenate([np.sign(a) == np.sign(b) for a, b in adv_pairs]) if adv_pairs else np.zeros(0)
    verl_selected = {tk for tk in ref.keys if any((key_of[tk], v) in kept.scores for v in views)}
    ours_selected = set(ref.scores.logp)
    both = sorted(verl_selected & ours_selected)
    view_scores = {v: _differences([(kept.scores[(key_of[tk], v)], ref.scores.logp[tk][v]) for tk in both
                                    if v in ref.scores.logp[tk]]) for v in views}
    records = [step_record(trajs[t], trajs[t].steps[k], cfg.env) for t, k in both]
    rendered, _ = render_steps(records, views, renderer, cfg.max_prompt_length)
    rows = {r.key: r for r in kept.rows}
    same_ids = sum(all(list(step.contexts[v]) == list(rows[key_of[both[i]]].extra["ocsd_view_ids"][v]) for v in views)
                   for i, step in rendered)
    adv = _differences(adv_pairs)
    adv["sign_agreement"] = float(signs.mean()) if signs.size else float("nan")
    return {"step": kept.step, "method": cfg.method, "rows": len(kept.rows), "verl_recomputed": exact,
            "old_logp": _differences(old), "view_scores": view_scores, "advantages": adv,
            "selection": {"verl": len(verl_selected), "single_device": len(ours_selected), "both": len(both)},
            "view_ids": {"compared": len(rendered), "identical": int(same_ids)}}


def _print(report: dict) -> None:
    sel, ids = report["selection"], report["view_ids"]
    print(f"step {report['step']} of a {report['method']} run: {report['rows']} rows")
    print(f"verl's advantages recomputed from its kept inputs: largest difference {report['verl_recomputed']:.3g}")
    print(f"selected steps: verl {sel['verl']}, single-device {sel['single_device']}, both {sel['both']}")
    print(f"view prompt ids of the steps selected by both: {ids['identical']} of {ids['compared']} identical")
    print("single-device against verl (per token)      tokens    max |diff|   mean |diff|")
    lines = [("old log-probs", report["old_logp"])] + [(f"{v} log-probs", d) for v, d in report["view_scores"].items()]
    for name, d in lines + [("token advantages", report["advantages"])]:
        print(f"  {name:<40} {d['tokens']:>7}  {d['max_abs']:>11.4g}  {d['mean_abs']:>11.4g}")
    print(f"token advantages with the same sign: {report['advantages']['sign_agreement']:.2%}")


def main(argv: Sequence[str] | None = None) -> int:
    """The command (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m training.verl.parity", description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="the verl run folder (trainer.default_local_dir)")
    parser.add_argument("--step", type=int, default=1, help="the kept step (default 1)")
    parser.add_argument("--weights", type=Path, help="Hugging Face folder of the weights before the step's update "
                        "(default for step 1: the run's initial weights, model of run.json)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on the CPU")
    parser.add_argument("--groups", type=int, help="compare the first N task groups only (each group's advantages "
                        "depend on it alone; for a quicker check on a CPU)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    from ocsd.replay.models import load_model, load_tokenizer
    from training.policy import policy_tokenizer

    info_file = args.run / RUN_FILE
    try:
        info = read_run_info(args.run)
        cfg = make_config(info["config"], source=str(info_file))
        kept = read_kept_batch(batch_path(args.run, args.step))
        if args.groups is not None:
            if get_method(cfg.method).selection == "random":
                raise ValueError(f"--groups: method {cfg.method!r} selects steps at random over the whole batch; "
                                 "compare it whole")
            kept = first_groups(kept, args.groups)
    except (OSError, ValueError, KeyError) as err:
        print(f"training.verl.parity: {err if not isinstance(err, KeyError) else f'{info_file}: no {err}'}",
              file=sys.stderr)
        return 2
    weights = args.weights
    if weights is None:
        if args.step != 1:
            print(f"training.verl.parity: step {args.step} was scored with the weights of step {args.step - 1}: "
                  "name them with --weights", file=sys.stderr)
            return 2
        weights = Path(info["model"])
    dtype = args.dtype or ("bfloat16" if str(args.device).startswith("cuda") else "float32")
    model = load_model(weights, device=args.device, dtype=dtype).eval()
    tokenizer = (load_tokenizer(weights) if (Path(weights) / "tokenizer_config.json").is_file()
                 else policy_tokenizer(cfg.model))
    report = compare(kept, cfg, model, tokenizer)
    print(json.dumps(report, indent=1)) if args.json else _print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
