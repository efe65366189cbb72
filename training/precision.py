"""AdamW with float32 master weights for parameters held in bfloat16 or float16.

A bfloat16 number keeps 8 significant bits: near a weight of 0.02 its spacing is about 1.2e-4, so an AdamW step
of the paper's size (lr 1e-6 for full fine-tuning, 2e-5 for the LoRA runs) rounds back to the same weight, and
optimizer moments stored in bfloat16 lose the small second moments. Mixed-precision training (verl's FSDP
actor: ``param_dtype`` bfloat16 for compute, float32 parameters and optimizer state) keeps a float32 copy of
each trainable parameter: :class:`MasterWeightAdamW` accumulates gradients into float32, steps AdamW on the
float32 copies and writes them back, rounded, into the model's low-precision parameters, which forward and
backward passes keep using.

:func:`make_optimizer` returns plain :class:`torch.optim.AdamW` when every trainable parameter is float32.
"""

from __future__ import annotations

from typing import Iterable

import torch

__all__ = ["MasterWeightAdamW", "make_optimizer", "optimized_parameters"]


class MasterWeightAdamW:
    """AdamW on float32 master copies of low-precision parameters (float32 ones are stepped in place).

    Each low-precision parameter's gradient is added into its master's float32 gradient as soon as a backward
    pass has accumulated it (``register_post_accumulate_grad_hook``), and the parameter's own gradient is
    dropped, so gradient accumulation over micro-batches happens in float32. :meth:`step` steps AdamW on the
    masters and copies them into the parameters.

    Parameters
    ----------
    params : iterable of torch.nn.Parameter
        The trainable parameters, any mix of float32, bfloat16 and float16.
    **adamw
        :class:`torch.optim.AdamW` settings (``lr``, ``weight_decay``, ...).

    Notes
    -----
    Gradient clipping and finiteness checks belong on :attr:`param_groups` (the masters' float32 gradients),
    not on the model's parameters, whose gradients stay ``None``: use :func:`optimized_parameters`.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], **adamw):
        self.params = list(params)
        self.masters = [p if p.dtype == torch.float32 else
                        torch.nn.Parameter(p.detach().float().clone(), requires_grad=True) for p in self.params]
        self.inner = torch.optim.AdamW(self.masters, **adamw)
        for p, m in zip(self.params, self.masters):
            if m is not p:
                p.register_post_accumulate_grad_hook(_into_master(m))

    @property
    def param_groups(self) -> list[dict]:
        """The inner AdamW's groups (their ``params`` are the masters); set ``lr`` here."""
        return self.inner.param_groups

    @property
    def state(self):
        """The inner AdamW's per-master state (float32 moments)."""
        return self.inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the masters' gradients and any left on the parameters."""
        self.inner.zero_grad(set_to_none=set_to_none)
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One AdamW step on the masters, copied (rounded) into the low-precision parameters."""
        self.inner.step()
        for p, m in zip(self.params, self.masters):
            if m is not p:
                p.copy_(m)

    def state_dict(self) -> dict:
        """AdamW's state and the masters' float32 values (a resumed run keeps the updates below the
        parameters' rounding)."""
        return {"adamw": self.inner.state_dict(),
                "masters": {i: m.detach().cpu().clone() for i, (p, m) in enumerate(zip(self.params, self.masters))
                            if m is not p}}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output, or a plain AdamW state dict (a checkpoint written before master
        weights existed: its moments are cast to float32 and the masters start from the parameters)."""
        if "adamw" not in state:
            self.inner.load_state_dict(state)
            return
        self.inner.load_state_dict(state["adamw"])
        for i, value in state["masters"].items():
            if self.masters[int(i)].shape != value.shape:
                raise ValueError(f"master weight {i} has shape {tuple(value.shape)}, the parameter "
                                 f"{tuple(self.masters[int(i)].shape)}")
            self.masters[int(i)].copy_(value)
            self.params[int(i)].copy_(value)


def _into_master(master: torch.nn.Parameter):
    def hook(param: torch.Tensor) -> None:
        grad = param.grad.float()
        if master.grad is None:
            master.grad = grad
        else:
            master.grad.add_(grad)
        param.grad = None
    return hook


def make_optimizer(params: Iterable[torch.nn.Parameter], **adamw) -> torch.optim.AdamW | MasterWeightAdamW:
    """AdamW for ``params``: :class:`MasterWeightAdamW` when any is not float32, else :class:`torch.optim.AdamW`.

    Parameters
    ----------
    params : iterable of torch.nn.Parameter
    **adamw
        AdamW's settings (``lr``, ``weight_decay``, ...).
    """
    params = list(params)
    if all(p.dtype == torch.float32 for p in params):
        return torch.optim.AdamW(params, **adamw)
    return MasterWeightAdamW(params, **adamw)


def optimized_parameters(optimizer) -> list[torch.Tensor]:
    """The tensors an optimizer steps (the masters of :class:`MasterWeightAdamW`): clip their gradients."""
    return [p for group in optimizer.param_groups for p in group["params"]]
