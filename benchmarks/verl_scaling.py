"""Scaling of the veRL backend on one machine: the single-device trainer on one GPU, then verl on 1, 2 and 4 GPUs.

Every configuration trains OCSD on the same generated ALFWorld games with the same settings and policy (by default
the catalogue's Qwen2.5-Coder-0.5B-Instruct from its base weights, full fine-tuning, lr 1e-6, KL 0.01, vLLM
rollouts, 16 tasks x 8 rollouts of at most 12 steps, 64-token responses) for ``--steps`` steps, without
checkpoints in between:

* ``single``: ``python -m training.train --config training/configs/alfworld_paper.yaml rollout_engine=vllm`` on
  GPU 0;
* ``verl``: ``python -m training.verl.main`` with ``trainer.n_gpus_per_node=N`` on GPUs 0..N-1 (its fast-path
  settings are those of ``training/verl/config/ocsd_trainer.yaml``).

Each runs as its own process (``CUDA_VISIBLE_DEVICES`` names its GPUs, counted among those the benchmark itself
sees) into ``RUNS/<label>`` (``--runs``), one after another on GPUs 0..N-1; with ``--side-by-side``, configurations
that fit on the machine together run at once on disjoint GPUs (in order, each where the GPUs left allow: on four
GPUs, the single-device trainer, verl on 1 and verl on 2 at once, then verl on 4 alone). They then share the host's
CPUs and memory but no GPU; each result names its GPUs (``devices``) and the configurations beside it
(``alongside``). Its output goes to ``OUT/<label>.log``, and it writes ``OUT/<label>.json``: the configuration, the
machine, every ``metrics.jsonl`` row and a ``summary`` with
the mean seconds per step of each phase (``time/rollout``, ``time/old_logprob``, ``time/ref_logprob``,
``time/replay_scoring``, ``time/update``, ``time/step``) over the steps after the first (which pays compilation
and warm-up), the step's checkpoint time left out, and steps/s. Then the table of ``figures.verl_scaling``
(``OUT/verl_scaling.md``); the figure: ``python -m figures.verl_scaling OUT --out OUT``.

    python benchmarks/verl_scaling.py --games DIR [--model qwen2.5-coder-0.5b] [--gpus 1,2,4] [--steps 4]
        [--side-by-side] [--out benchmarks/results/verl_scaling] [--verl-arg OVERRIDE ...]

The machine: prepared as for ``bash results/run_on_gpu.sh verl`` (the bundle with the stack of
``scripts/gpu_stack.sh download DIR --verl``, then ``unpack``; ``VERL_USE_EXTERNAL_MODULES=training.verl.plugin``
with the suite on ``PYTHONPATH``), and the policy converted into the cache once (``python -m ocsd.replay.catalog
convert qwen2.5-coder-0.5b --gguf FILE``, the GGUF carried in parts by ``scripts/gpu_stack.sh models``). Refused
before anything runs: fewer GPUs than ``--gpus`` asks for, a policy that is not installed, a missing games folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.verl_backend import add_run_options, failure_message, run_settings  # noqa: E402
from ocsd.cli import InputError, entry_point  # noqa: E402

PHASES = ("time/rollout", "time/old_logprob", "time/ref_logprob", "time/replay_scoring", "time/update")
"""The phases each result's summary holds, besides ``time/step``."""
CHECKPOINT = "time/save_checkpoint"
SCHEMA = "verl_scaling/1"
POLL_S = 1.0
"""Seconds between looks at the runs of a wave (each run's wall time is taken when it ends)."""


@dataclass(frozen=True)
class Configuration:
    """One run of the benchmark: the backend and its GPUs."""

    backend: str
    gpus: int

    @property
    def label(self) -> str:
        return f"{self.backend}_{self.gpus}gpu"


def gpu_counts(text: str) -> tuple[int, ...]:
    """``--gpus``: comma-separated GPU counts of the verl runs, each >= 1, in increasing order, none twice."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus: {text!r} is not a comma-separated list of counts") from None
    if any(c < 1 for c in counts) or list(counts) != sorted(set(counts)):
        raise argparse.ArgumentTypeError(f"--gpus: {text!r} must be increasing counts >= 1, none twice")
    return counts


def configurations(gpus: Sequence[int], single: bool = True) -> list[Configuration]:
    """The single-device trainer on one GPU (unless ``single`` is false), then verl on each count of ``gpus``."""
    return ([Configuration("single", 1)] if single else []) + [Configuration("verl", g) for g in gpus]


def schedule(configs: Sequence[Configuration], gpus_available: int, side_by_side: bool = False
             ) -> list[list[tuple[Configuration, tuple[int, ...]]]]:
    """The configurations in waves, each configuration with its GPUs (indices among those visible).

    Without ``side_by_side`` every configuration is a wave of its own on GPUs ``0..N-1``. With it, each
    configuration joins the current wave on the next free GPUs when enough are left, and starts a new wave
    otherwise (first fit, in order), so that no GPU is shared within a wave.

    Raises
    ------
    ValueError
        A configuration needs more GPUs than ``gpus_available``.
    """
    waves: list[list[tuple[Configuration, tuple[int, ...]]]] = []
    free = 0
    for config in configs:
        if config.gpus > gpus_available:
            raise ValueError(f"{config.label} needs {config.gpus} GPUs, {gpus_available} are available")
        if not side_by_side or not waves or config.gpus > gpus_available - free:
            waves.append([])
            free = 0
        waves[-1].append((config, tuple(range(free, free + config.gpus))))
        free += config.gpus
    return waves


def visible_devices(indices: Sequence[int], parent: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` of a configuration on GPUs ``indices``: those positions of the benchmark's own
    ``parent`` list when it has one, else the indices themselves."""
    if parent:
        names = [name.strip() for name in parent.split(",") if name.strip()]
        return ",".join(names[i] for i in indices)
    return ",".join(str(i) for i in indices)


def shared_settings(args) -> dict[str, object]:
    """The training settings every configuration runs with (``TrainConfig`` keys): the benchmarks' shared
    :func:`~benchmarks.verl_backend.run_settings` with ``--model`` from its base weights, without checkpoints."""
    return {**run_settings(args), "model": args.model, "save_freq": 1000}


def command(config: Configuration, args, run_dir: Path) -> list[str]:
    """The training command of one configuration."""
    settings = {**shared_settings(args), "run_dir": str(run_dir), "run_name": config.label}
    if config.backend == "verl":
        return [sys.executable, "-m", "training.verl.main", "ocsd=alfworld", "ocsd.overwrite=true",
                *(f"ocsd.{k}={v}" for k, v in settings.items()), f"actor_rollout_ref.model.path={args.model}",
                f"trainer.n_gpus_per_node={config.gpus}",
                f"actor_rollout_ref.rollout.gpu_memory_utilization={args.gpu_memory}",
                f"actor_rollout_ref.rollout.agent.num_workers={args.workers}", *args.verl_arg]
    return [sys.executable, "-m", "training.train", "--config", str(ROOT / "training/configs/alfworld_paper.yaml"),
            *(f"{k}={v}" for k, v in settings.items()), "overwrite=true", "rollout_engine=vllm", "device=cuda",
            f"vllm_gpu_memory_utilization={args.gpu_memory}", f"env_workers={args.workers}", "save_weights=false"]


def summarise(rows: Sequence[dict]) -> dict[str, float]:
    """Mean seconds per step of each phase and of the step (its checkpoint time left out) over the steps after the
    first (all of them when there is one), a phase a step did not time counting 0 s; and steps/s.

    Raises
    ------
    ValueError
        No row has ``time/step``.
    """
    timed = [r for r in rows if isinstance(r.get("time/step"), (int, float))]
    if not timed:
        raise ValueError("no metrics row has time/step")
    use = timed[1:] or timed
    mean = {key: sum(float(r.get(key, 0.0)) for r in use) / len(use) for key in PHASES}
    step = sum(float(r["time/step"]) - float(r.get(CHECKPOINT, 0.0)) for r in use) / len(use)
    return {**mean, "time/step": step, "steps_per_s": 1.0 / step if step > 0 else 0.0, "steps_averaged": len(use)}


def result(config: Configuration, args, *, rows: list[dict], returncode: int, wall_s: float, card: str,
           devices: Sequence[int] = (), alongside: Sequence[str] = ()) -> dict:
    """What ``OUT/<label>.json`` holds; ``summary`` only when the run finished with timed steps."""
    out = {"schema": SCHEMA, "label": config.label, "backend": config.backend, "gpus": config.gpus, "card": card,
           "model": args.model, "settings": shared_settings(args), "verl_args": list(args.verl_arg),
           "devices": list(devices or range(config.gpus)), "alongside": list(alongside),
           "returncode": returncode, "wall_s": wall_s, "rows": rows}
    if returncode == 0 and rows:
        out["summary"] = summarise(rows)
    return out


def run_wave(wave: Sequence[tuple[Configuration, tuple[int, ...]]], args, out: Path, card: str) -> list[dict]:
    """Train the configurations of one wave at once, each on its GPUs; their results (also written to
    ``OUT/<label>.json``), in the wave's order."""
    from ocsd.records import read_metrics

    parent = os.environ.get("CUDA_VISIBLE_DEVICES")
    started = []
    for config, devices in wave:
        run_dir = Path(args.runs).resolve() / config.label
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible_devices(devices, parent))
        log = open(out / f"{config.label}.log", "w")
        process = subprocess.Popen(command(config, args, run_dir), cwd=ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
        started.append((config, devices, run_dir, log, process, time.perf_counter()))
    ended: dict[str, tuple[int, float]] = {}  # label: exit status and wall time, taken when each run ends
    while len(ended) < len(started):
        for config, _, _, log, process, start in started:
            if config.label not in ended and process.poll() is not None:
                ended[config.label] = (process.returncode, time.perf_counter() - start)
                log.close()
        if len(ended) < len(started):
            time.sleep(POLL_S)
    results = []
    for config, devices, run_dir, _, _, _ in started:
        returncode, wall_s = ended[config.label]
        rows = read_metrics(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
        alongside = [other.label for other, _ in wave if other is not config]
        got = result(config, args, rows=rows, returncode=returncode, wall_s=wall_s, card=card, devices=devices,
                     alongside=alongside)
        (out / f"{config.label}.json").write_text(json.dumps(got, indent=1))
        results.append(got)
    return results


def check_machine(args, gpus_needed: int) -> str:
    """The GPUs' description; :class:`InputError` when the machine or the inputs cannot run the benchmark."""
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < gpus_needed:
        raise InputError(f"--gpus: the largest run needs {gpus_needed} GPUs, this machine has {have}")
    from ocsd.replay.models import ModelNotFoundError, check_model_folder

    try:
        check_model_folder(args.model)
    except ModelNotFoundError as err:
        raise InputError(f"--model {args.model}: {err}") from None
    if not Path(args.games).is_dir():
        raise InputError(f"--games {args.games}: no such folder (python -m training.envs.alfworld generate)")
    return f"{have} x {torch.cuda.get_device_name(0)}"


def build_parser() -> argparse.ArgumentParser:
    """The command line of :func:`main`."""
    p = argparse.ArgumentParser(prog="python benchmarks/verl_scaling.py", description=__doc__.split("\n\n")[0])
    add_run_options(p)
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="catalogue model or Hugging Face folder")
    p.add_argument("--gpus", type=gpu_counts, default=(1, 2, 4), help="GPU counts of the verl runs (1,2,4)")
    p.add_argument("--no-single", dest="single", action="store_false", help="leave out the single-device trainer")
    p.add_argument("--side-by-side", action="store_true",
                   help="run configurations that fit on the machine together at once, on disjoint GPUs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "verl_scaling"),
                   help="folder of the JSON results, logs and table")
    p.add_argument("--runs", default="/tmp/verl_scaling_runs", help="folder of the run folders (not kept)")
    return p


def _main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps < 1:
        raise InputError(f"--steps must be >= 1, got {args.steps}")
    card = check_machine(args, max(args.gpus))  # before anything is written
    import torch

    waves = schedule(configurations(args.gpus, args.single), torch.cuda.device_count(), args.side_by_side)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for wave in waves:
        if len(wave) > 1:
            print("side by side: " + ", ".join(f"{c.label} on GPU {','.join(map(str, d))}" for c, d in wave),
                  flush=True)
        for got in run_wave(wave, args, out, card):
            label = got["label"]
            if "summary" not in got:
                failed.append(label)
                print(failure_message(label, got["returncode"], len(got["rows"]), out / f"{label}.log"), flush=True)
                continue
            print(f"{label}: {got['summary']['time/step']:.2f} s a step, {got['wall_s']:.0f} s in all", flush=True)
    done = [p for p in sorted(out.glob("*.json")) if json.loads(p.read_text()).get("summary")]
    if done:
        from figures.verl_scaling import load_points, scaling_table

        text = scaling_table(load_points(done))
        (out / "verl_scaling.md").write_text(text + "\n")
        print(f"\n{card}; {args.model}, OCSD, {args.batch} x {args.group} episodes of at most {args.max_steps} "
              f"steps, responses up to {args.response} tokens\n\n{text}")
    return 1 if failed else 0


main = entry_point(_main, "benchmarks/verl_scaling.py")

if __name__ == "__main__":
    sys.exit(main())
