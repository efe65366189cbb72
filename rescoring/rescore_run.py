"""A run's stored steps scored again by another model, written in the replay-score format.

``python -m rescoring.rescore_run --run DIR --model M --out OUT`` reads the scored steps of the run's checkpoints,
renders them again under the views they were scored under (``meta.json``'s ``views``: the Student view, i.e. the
rollout prompt, Full and Observation-Ablated) with the scorer's own tokenizer and chat template, scores the same
responses with ``M``, and writes ``OUT`` as a run folder: ``run.json`` and ``global_step_N/replay/`` for every
checkpoint, so that every diagnostic (``diagnostics.*``, ``rescoring.swap --run OUT --model M``) reads it unchanged.
``meta.json`` names the scorer (``model``, ``scorer``) and where the steps came from (``source``).

What stays the policy's: the steps themselves (actions, observations, labels, rewards, advantages), which were
selected (``selected``: the policy's top-rho step NLL, kept as ``nll``), and ``n_tokens`` of the unscored steps
(they have no stored tokens to carry over). What is the scorer's: the token rows of every scored step (ids and
pieces of its tokenizer) and their log-probs under every view.

**Another tokenizer.** The stored response ids are decoded with the run's tokenizer and encoded again with the
scorer's (:class:`Retokenizer`). Special tokens at the end of a response (the end-of-turn token the policy wrote;
SmolLM2's converted tokenizer declared ``<|im_start|>`` as its end of sequence, so its responses end in that token)
are not text: they are cut off before decoding, and a response that had one gets the scorer's own end-of-turn token
(``<|im_end|>`` for the ChatML models) instead. Every scorer thus scores the same event, "the answer ends here",
with the token its own template ends a turn with, rather than another model's special token that it never learned
to emit there. A response cut by the length limit (no special token at its end) gets none. With the run's own
tokenizer nothing is decoded: the ids are kept as they are, so re-scoring a collection with its own weights gives its
stored log-probs (the identity check of ``tests/rescoring/test_rescore_run.py``).

Command::

    python -m rescoring.rescore_run --run DIR --model M --out OUT [--ckpt-steps 1,10] [--device cuda]
        [--dtype bfloat16] [--max-steps N] [--source-tokenizer T] [--no-progress] [--json]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from diagnostics.load import DiagnosticsError
from diagnostics.options import show_progress
from ocsd.cli import Once, emit, format_table, output_folder, positive_int, same_place, write_json
from ocsd.records import RecordError, read_run_info, write_replay
from ocsd.replay.stored import stored_records
from ocsd.replay.views import StepRecord, get_view
from rescoring.rescore import (Checkpoint, Rescorer, check_weights_flags, parse_steps, rescoring_entry_point,
                               run_checkpoints, run_settings, scoring_device)
from training.replay import token_pieces

__all__ = ["END_OF_TURN", "Retokenizer", "rescore_checkpoint", "rescore_run", "main"]

END_OF_TURN = "<|im_end|>"
"""The end-of-turn token of ChatML templates (SmolLM2, Qwen2.5, Qwen3)."""


def _end_token_id(tokenizer) -> int | None:
    """The token a chat turn of ``tokenizer``'s model ends with: ``<|im_end|>`` when the vocabulary has it, else the
    end-of-sequence token."""
    vocab = tokenizer.get_vocab()
    return vocab[END_OF_TURN] if END_OF_TURN in vocab else tokenizer.eos_token_id


@dataclass
class Retokenizer:
    """Maps response ids of one tokenizer to another's (module docstring).

    Parameters
    ----------
    source, target : tokenizers
        The run's tokenizer and the scorer's.
    """

    source: object
    target: object

    def __post_init__(self):
        self.same = self.source.get_vocab() == self.target.get_vocab()
        self._special = set(self.source.all_special_ids) | {
            i for i, tok in getattr(self.source, "added_tokens_decoder", {}).items() if getattr(tok, "special", False)}
        self._end = _end_token_id(self.target)

    def __call__(self, ids: Sequence[int]) -> list[int]:
        """The response as the scorer's ids; unchanged with the same tokenizer."""
        ids = [int(i) for i in ids]
        if self.same:
            return ids
        body = list(ids)
        while body and body[-1] in self._special:
            body.pop()
        text = self.source.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        out = self.target.encode(text, add_special_tokens=False) if text else []
        if len(body) < len(ids) and self._end is not None:
            out.append(int(self._end))
        return out


def _records(ckpt: Checkpoint, retokenize: Retokenizer, max_steps: int | None = None
             ) -> tuple[list[StepRecord], list[str]]:
    """The checkpoint's scored steps (the first ``max_steps`` in (trajectory, step) order) with the scorer's
    response ids; why any step was left out."""
    records, left_out = [], []
    stored = stored_records(ckpt.steps, ckpt.tokens, str(ckpt.meta["env"]), where=f"{ckpt.folder}/replay/steps.parquet")
    for key, record in sorted(stored.items())[:max_steps]:
        ids = retokenize(record.response_ids)
        if ids:
            records.append(replace(record, response_ids=tuple(ids)))
        else:
            left_out.append(f"{record.key}: the response is empty in the scorer's tokens")
    return records, left_out


def rescore_checkpoint(ckpt: Checkpoint, rescorer: Rescorer, retokenize: Retokenizer, *, scorer: str,
                       max_steps: int | None = None, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """One checkpoint's scored steps (at most ``max_steps``, the first in (trajectory, step) order; the others are
    written as unscored) scored by ``rescorer`` under its recorded views.

    Returns
    -------
    (steps, tokens, meta)
        The tables and ``meta.json`` of the re-scored checkpoint (the stored steps with ``scored`` and ``n_tokens``
        of the steps scored again; the scorer's token rows; the stored meta with ``model`` the scorer, ``scorer``,
        ``source`` and ``skipped_steps`` the steps that could not be scored again).
    """
    views = [str(v) for v in ckpt.meta["views"]]
    records, left_out = _records(ckpt, retokenize, max_steps)
    rendered, skipped = rescorer.render(records, [get_view(v) for v in views])
    left_out += skipped
    scores = rescorer.score([r.contexts for r in rendered], [r.step.response_ids for r in rendered],
                            keys=[r.step.key for r in rendered], progress=progress,
                            desc=f"{ckpt.name} under {scorer}")
    cols: dict[str, list] = {c: [] for c in ("traj_uid", "step_idx", "token_idx", "token_id", "token")}
    logp: dict[str, list] = {v: [] for v in views}
    lengths, cache = {}, {}
    for r, score in zip(rendered, scores):
        uid, k = r.step.key.rsplit(":", 1)
        ids, n = list(r.step.response_ids), len(r.step.response_ids)
        lengths[(uid, int(k))] = n
        cols["traj_uid"] += [uid] * n
        cols["step_idx"] += [int(k)] * n
        cols["token_idx"] += list(range(n))
        cols["token_id"] += ids
        cols["token"] += token_pieces(rescorer.tokenizer, ids, cache)
        for v in views:
            logp[v].append(np.asarray(score[v], dtype=np.float32))
    tokens = pd.DataFrame(cols).astype({"step_idx": np.int32, "token_idx": np.int32, "token_id": np.int64})
    for v in views:
        tokens[f"logp_{v}"] = np.concatenate(logp[v]) if logp[v] else np.zeros(0, np.float32)
    tokens.insert(0, "global_step", np.int64(ckpt.global_step))
    steps = ckpt.steps.copy()
    key = list(zip(steps["traj_uid"].astype(str), steps["step_idx"].astype(int)))
    steps["scored"] = [k in lengths for k in key]
    steps["n_tokens"] = np.array([lengths.get(k, n) for k, n in zip(key, steps["n_tokens"])], dtype=np.int32)
    meta = {**ckpt.meta, "model": scorer, "skipped_steps": len(left_out),
            "scorer": {"model": scorer, "weights": rescorer.weights, "device": rescorer.device,
                       "dtype": rescorer.dtype, "retokenized": not retokenize.same},
            "source": {"run": str(ckpt.meta.get("run")), "checkpoint": str(ckpt.folder),
                       "model": str(ckpt.meta.get("model"))}}
    meta.pop("schema_version", None)
    return steps, tokens, meta


def _source_tokenizer(run: Path, given: str | None):
    """The tokenizer of the run's policy: ``given``, else that of the model ``run.json`` names."""
    from training.policy import policy_tokenizer

    name = given or run_settings(run).get("model")
    if not name:
        raise DiagnosticsError(f"{run}/run.json names no model; pass --source-tokenizer (the tokenizer the run "
                               f"generated with, e.g. smollm2)")
    return policy_tokenizer(str(name))


def _prepare_out(out: Path, run: Path, model: str, ckpts: Sequence[Checkpoint] = ()) -> None:
    """Refuse to write into the run itself, over a folder that is not an earlier re-scoring, over a re-scoring of
    another run or by another scorer, or over checkpoints this re-scoring already holds (it may add missing ones).
    """
    if out.resolve() == run.resolve():
        raise DiagnosticsError(f"--out {out}: that is the run itself; name a new folder")
    if not out.exists() or not any(out.iterdir()):
        return
    info = out / "run.json"
    try:
        earlier = read_run_info(out) if info.is_file() else {}
    except RecordError:
        earlier = {}
    if "rescored_from" not in earlier:
        raise DiagnosticsError(f"--out {out} exists and is not a re-scored run; name a new folder")
    source, scorer = str(earlier["rescored_from"]), str(earlier.get("scorer"))
    if not same_place(source, str(run)) or not same_place(scorer, model):
        raise DiagnosticsError(f"--out {out} holds the re-scoring of {source} by {scorer}, not of {run} by {model}; "
                               f"name a new folder")
    done = [c.folder.name for c in ckpts if (out / c.folder.name / "replay" / "meta.json").is_file()]
    if done:
        raise DiagnosticsError(f"--out {out} already holds {', '.join(done)} re-scored by {model}; leave them out "
                               f"of --ckpt-steps (missing checkpoints may be added) or name a new folder")


def rescore_run(run: str | Path, model: str, out: str | Path, *, ckpt_steps: Sequence[int] | None = None,
                device: str | None = None, dtype: str | None = None, source_tokenizer: str | None = None,
                max_steps: int | None = None, progress: bool = True) -> dict:
    """Score the stored steps of ``run``'s checkpoints with ``model`` and write them to ``out`` (module docstring).

    Returns
    -------
    dict
        ``{"run", "model", "parameters", "out", "retokenized", "device", "dtype",
        "checkpoints": [{"global_step", "scored", "skipped"}], "seconds"}``.
    """
    run, out = Path(run), Path(out)
    _prepare_out(out, run, model)
    settings = run_settings(run)
    ckpts = run_checkpoints(run, ckpt_steps, model=model, default="all")
    _prepare_out(out, run, model, ckpts)
    device = scoring_device(device, settings)
    dtype = dtype or str(settings.get("dtype") or "float32")
    t0 = time.perf_counter()
    rescorer = Rescorer(ckpts[0].weights, env=str(ckpts[0].meta["env"]),
                        max_prompt_length=settings.get("max_prompt_length"), device=device, dtype=dtype,
                        token_budget=settings.get("scoring_token_budget"))
    retokenize = Retokenizer(_source_tokenizer(run, source_tokenizer), rescorer.tokenizer)
    parameters = int(sum(p.numel() for p in rescorer.scorer.model.parameters()))
    load_s = time.perf_counter() - t0
    info = read_run_info(run) if (run / "run.json").is_file() else {"run": run.name}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "run.json", {**info, "rescored_from": str(run), "scorer": model,
                                  "scorer_parameters": parameters})
    summary = []
    t1 = time.perf_counter()
    for ckpt in tqdm(ckpts, desc=f"re-scoring {run.name} with {model}", disable=not progress):
        steps, tokens, meta = rescore_checkpoint(ckpt, rescorer, retokenize, scorer=model, max_steps=max_steps,
                                                 progress=progress)
        target = out / ckpt.folder.name / "replay"
        if target.exists():  # left by a re-scoring that stopped before its meta.json (_prepare_out)
            shutil.rmtree(target)
        write_replay(target, steps, tokens, meta)
        summary.append({"global_step": ckpt.global_step, "scored": int(steps["scored"].sum()),
                        "skipped": meta["skipped_steps"]})
    return {"run": str(run), "model": model, "parameters": parameters, "out": str(out),
            "retokenized": not retokenize.same,
            "device": device, "dtype": dtype, "checkpoints": summary,
            "seconds": {"load": load_s, "score": time.perf_counter() - t1}}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rescoring.rescore_run", description=__doc__.split("\n")[0])
    p.add_argument("--run", required=True, action=Once, metavar="DIR",
                   help="run folder whose stored steps are scored again")
    p.add_argument("--model", required=True, help="the scorer: a model name (smollm2, qwen2.5-coder-1.5b, ...) or a "
                                                 "Hugging Face folder")
    p.add_argument("--out", required=True, type=output_folder, metavar="DIR", help="the re-scored run folder to write")
    p.add_argument("--ckpt-steps", default=None, metavar="N,N,...", help="checkpoints (default: all of the run)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the run's device when available)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16, ... (default: the run's dtype)")
    p.add_argument("--max-steps", type=positive_int("--max-steps"), default=None, metavar="N",
                   help="score at most N steps of each checkpoint (the first; a quick look or a speed check)")
    p.add_argument("--source-tokenizer", default=None, metavar="MODEL",
                   help="the tokenizer the run generated with (default: run.json's model)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    check_weights_flags(args)
    result = rescore_run(args.run, args.model, args.out, ckpt_steps=parse_steps(args.ckpt_steps),
                         device=args.device, dtype=args.dtype, source_tokenizer=args.source_tokenizer,
                         max_steps=args.max_steps, progress=show_progress(args))
    rows = [[c["global_step"], c["scored"], c["skipped"]] for c in result["checkpoints"]]
    table = format_table(["global step", "scored", "skipped"], rows,
                         title=f"{result['run']} scored by {result['model']} "
                               f"({'re-tokenised' if result['retokenized'] else 'same tokenizer'}, "
                               f"{result['device']} {result['dtype']}) -> {result['out']}")
    emit(args.json, result, table)
    return 0


main = rescoring_entry_point(_main, "rescoring.rescore_run")

if __name__ == "__main__":
    sys.exit(main())
