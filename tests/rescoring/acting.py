"""A trainer run of the tiny random model whose rollouts act: test input for the re-scoring diagnostics.

The tiny model never writes the action format, so its own rollouts are all invalid and share one operator.
Here its rollout engine is replaced by :class:`AdmissibleEngine`, which answers every interaction prompt
with one of the admissible actions listed in it (with probability ``p_invalid`` made inadmissible: its
object number replaced by 99, so that the game answers "Nothing happens."), in the response format of the expert demonstrations. Everything else is the real trainer
on the real ALFWorld engine: the tiny model computes the old log-probs, the step selection, the replay
scores and the update, and the trainer writes the checkpoints (``actor/`` and ``replay/``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

ADMISSIBLE = re.compile(r"admissible actions of the current situation are: \[(.*?)\]\.", re.S)


class AdmissibleEngine:
    """A rollout engine that picks admissible actions from the prompt (see the module docstring)."""

    def __init__(self, p_invalid: float = 0.3):
        self.p_invalid = p_invalid

    def responder(self, tokenizer, settings, seed: int):
        from training.warm_start.demonstrations import response_ids

        rng = np.random.default_rng(seed)

        def respond(active, prompts):
            out = []
            for ids in prompts:
                match = ADMISSIBLE.findall(tokenizer.decode(ids))
                actions = re.findall(r"'([^']*)'", match[-1]) if match else []
                action = actions[int(rng.integers(len(actions)))] if actions else "look"
                if rng.random() < self.p_invalid:  # the same verb on an object that is not there
                    action = re.sub(r"\d+$", "99", action) if re.search(r"\d+$", action) else "fly to the moon"
                out.append(response_ids(tokenizer, action, "I act."))
            return out

        return respond

    def sync(self, model) -> None:
        pass

    def sleep(self) -> None:
        pass

    def close(self) -> None:
        pass


def acting_run(run_dir: Path, games_dir: Path, *, total_steps: int = 2, lr: float = 1e-3, seed: int = 0,
               batch_size: int = 2, group_size: int = 4, max_steps: int = 6) -> Path:
    """Train the tiny model for ``total_steps`` with :class:`AdmissibleEngine` rollouts; returns the run folder."""
    from training.config import make_config
    from training.trainer import Trainer

    cfg = make_config(dict(
        model="tiny", run_dir=str(run_dir), run_name=Path(run_dir).name, data="generated", games_dir=str(games_dir),
        n_train_games=2, n_val_games=1, batch_size=batch_size, group_size=group_size, max_steps=max_steps,
        max_response_length=24, max_prompt_length=1024, history_length=1, total_steps=total_steps, save_freq=1,
        test_freq=0, progress=False, rho=0.5, lr=lr, kl_coef=0.0, seed=seed, micro_batch_tokens=4096))
    trainer = Trainer(cfg)
    trainer.policy._engine = AdmissibleEngine()
    trainer.fit()
    return Path(run_dir)
