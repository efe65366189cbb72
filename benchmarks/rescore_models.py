"""Re-scoring a run's stored steps with scorer models of several sizes, side by side in one process.

For each ``--model`` the same stored steps (every scored step of the run's checkpoints ``--ckpt-steps``, at most
``--max-steps`` of each) are scored under the views they were recorded with (Student, Full, Observation-Ablated) by
:func:`rescoring.rescore_run.rescore_run` (packed scorer on CUDA, prefix cache on the CPU). Timed apart: loading the
model, and scoring (rendering, re-tokenising and the forward passes). Printed per model: steps, response tokens,
load and scoring seconds, steps per second after loading, and the scoring time relative to the first model.

Examples::

    PYTHONPATH=. python benchmarks/rescore_models.py --run results/ocsd_smollm2_vllm_s2 --ckpt-steps 1 \\
        --max-steps 10 --model smollm2 --model qwen2.5-coder-0.5b                    # this CPU
    PYTHONPATH=. python benchmarks/rescore_models.py --run RUN --model qwen2.5-coder-1.5b --device cuda \\
        --dtype bfloat16 --json benchmarks/results/rescore_models_h200.json          # a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ocsd.records import read_checkpoint  # noqa: E402
from rescoring.rescore import parse_steps  # noqa: E402
from rescoring.rescore_run import rescore_run  # noqa: E402


def measure(run: Path, model: str, out: Path, args) -> dict:
    """Re-score ``run`` with ``model`` into ``out``; what it took and what it scored."""
    result = rescore_run(run, model, out, ckpt_steps=parse_steps(args.ckpt_steps), device=args.device,
                         dtype=args.dtype, max_steps=args.max_steps, progress=False)
    tokens = pd.concat([read_checkpoint(p).tokens for p in sorted(out.glob("global_step_*"))])
    steps = int(sum(c["scored"] for c in result["checkpoints"]))
    score_s = result["seconds"]["score"]
    return {"model": model, "parameters": result["parameters"], "steps": steps, "response_tokens": int(len(tokens)),
            "load_s": round(result["seconds"]["load"], 2), "score_s": round(score_s, 2),
            "steps_per_s": round(steps / score_s, 2) if score_s else None, "device": result["device"],
            "dtype": result["dtype"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", required=True, type=Path, help="a run folder with stored replay scores")
    p.add_argument("--model", action="append", required=True, help="a scorer (repeatable)")
    p.add_argument("--ckpt-steps", default=None, help="checkpoints (default all)")
    p.add_argument("--max-steps", type=int, default=None, help="at most this many steps of each checkpoint")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, model in enumerate(args.model):
            rows.append(measure(args.run, model, Path(tmp) / f"m{i}", args))
            first = rows[0]["score_s"]
            rows[-1]["score_vs_first"] = round(rows[-1]["score_s"] / first, 2) if first else None
            print(json.dumps(rows[-1]), flush=True)
    print(pd.DataFrame(rows).to_string(index=False))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        import torch

        device = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor()
        args.json.write_text(json.dumps({"machine": device or platform.machine(), "cpus": os.cpu_count(),
                                         "run": str(args.run), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
