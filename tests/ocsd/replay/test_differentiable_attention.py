"""``differentiable_attention``: a differentiated forward on CUDA runs without cuDNN's attention kernel (whose
backward gave NaN gradients for padded bfloat16 rows on an H100); other passes keep torch's choice of kernel."""

from __future__ import annotations

import torch

from ocsd.replay.scoring.cache import differentiable_attention


def _enabled():
    cuda = torch.backends.cuda
    return {"cudnn": cuda.cudnn_sdp_enabled(), "flash": cuda.flash_sdp_enabled(),
            "efficient": cuda.mem_efficient_sdp_enabled(), "math": cuda.math_sdp_enabled()}


def test_a_differentiated_cuda_forward_leaves_cudnn_out_and_restores_the_choice_after():
    before = _enabled()
    with torch.enable_grad(), differentiable_attention(torch.device("cuda")):
        inside = _enabled()
    assert inside == {"cudnn": False, "flash": True, "efficient": True, "math": True}
    assert _enabled() == before


def test_forward_only_and_cpu_passes_keep_torchs_choice():
    before = _enabled()
    with torch.inference_mode(), differentiable_attention(torch.device("cuda")):
        assert _enabled() == before
    with torch.enable_grad(), differentiable_attention("cpu"):
        assert _enabled() == before

