"""Rollout engines: what samples the policy's responses during rollouts (``rollout_engine`` setting).

``hf``
    Hugging Face ``generate`` (:func:`training.rollout.loop.generate`) on the policy's model, in memory: the
    trainer's own, or for a LoRA model in float32 the policy's copy with the adapters merged
    (:func:`merged_copy`; ``merged_inference``), which skips the adapters' extra products in every layer. Runs
    anywhere.
``vllm``
    A vLLM engine in the trainer's process on the same GPU (colocated, as verl runs it). It is built
    from the model's config with dummy weights, then receives the trainer's weights in memory
    (:func:`merged_weights`: LoRA merged out of place, Hugging Face parameter names); nothing is read
    from disk. Between rollouts it sleeps (KV cache freed, weights offloaded to host memory) and after
    each update the new weights are pushed before the next rollout (:meth:`VLLMEngine.sync`).

Both engines take the prompt token ids the renderer makes and return response token ids that end at
the first stop token (:func:`training.rollout.loop.stop_ids`). The old-policy log-probs are always the
trainer's own forward pass, never the engine's, so the PPO ratio and the replay scores mean the same
with either engine.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from typing import Protocol, Sequence

import numpy as np
import torch

from training.config import ENGINES, engine_problem
from training.rollout.gpu_share import device_share
from training.rollout.loop import GenerationSettings, Responder, ResponseStream, generate, stop_ids, trim_response


class EngineError(RuntimeError):
    """The rollout engine cannot be built here (the message names the setting and what to do)."""


class RolloutEngine(Protocol):
    """What the rollout needs from an engine."""

    name: str

    def responder(self, tokenizer, settings: GenerationSettings, seed: int) -> Responder:
        """``respond(active, prompts) -> response ids`` for one rollout sampled with ``settings``."""

    def stream(self, tokenizer, settings: GenerationSettings, seed: int) -> ResponseStream | None:
        """A stream of responses for a pipelined rollout, or None where the engine only answers whole
        batches (the rollout then goes turn by turn with :meth:`responder`)."""

    def sync(self, model) -> None:
        """Make the engine sample from ``model``'s current weights."""

    def sleep(self) -> None:
        """Release what the engine holds between rollouts (no-op where nothing is held)."""

    def close(self) -> None:
        """Free the engine."""


class HFEngine:
    """Hugging Face ``generate`` on the model it is given: the trainer's, or the policy's merged copy of it
    (:class:`training.policy.Policy` ``inference_model``); :meth:`sync` points it at the current one."""

    name = "hf"

    def __init__(self, model) -> None:
        self.model = model

    def responder(self, tokenizer, settings: GenerationSettings, seed: int) -> Responder:
        """Seed torch's generator with ``seed`` and sample every turn's prompts with ``generate``."""
        torch.manual_seed(seed)
        return lambda active, prompts: generate(self.model, tokenizer, prompts, settings)

    def scored_responder(self, tokenizer, settings: GenerationSettings, seed: int,
                         scores: dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor]) -> Responder:
        """:meth:`responder` that also keeps each response's token log-probs under the model's raw logits in
        ``scores``, keyed by ``(prompt ids, response ids)`` as tuples: the old-policy log-probs of those pairs
        while the weights stay as they are (``old_logprobs=rollout``)."""
        torch.manual_seed(seed)

        def respond(active: Sequence[int], prompts: Sequence[list[int]]) -> list[list[int]]:
            logprobs: list[torch.Tensor] = []
            responses = generate(self.model, tokenizer, prompts, settings, logprobs=logprobs)
            scores.update({(tuple(p), tuple(r)): lp for p, r, lp in zip(prompts, responses, logprobs)})
            return responses

        return respond

    def stream(self, tokenizer, settings: GenerationSettings, seed: int) -> None:
        """None: ``generate`` decodes whole batches, so a pipelined rollout would only split them."""
        return None

    def sync(self, model) -> None:
        self.model = model

    def sleep(self) -> None:
        pass

    def close(self) -> None:
        pass


def base_model(model):
    """The Hugging Face model under a PEFT wrapper (``model`` itself when it has none)."""
    return model.get_base_model() if hasattr(model, "peft_config") else model


@torch.no_grad()
def merged_weights(model) -> dict[str, torch.Tensor]:
    """The parameters of ``model`` under their Hugging Face names, LoRA adapters merged in.

    For a PEFT LoRA model each adapted weight is ``W + scaling * B @ A`` computed out of place (the
    trainer's weights are untouched, unlike ``merge_adapter``/``unmerge_adapter``, whose round trip
    does not restore bfloat16 weights exactly). Buffers are left out; tied weights appear once per name,
    as in ``state_dict``. Tensors stay on the model's device and dtype.

    Parameters
    ----------
    model : transformers.PreTrainedModel or peft.PeftModel

    Returns
    -------
    dict
        ``{name: tensor}`` as ``base_model(model).state_dict()`` names them after ``merge_and_unload``.
    """
    if not hasattr(model, "peft_config"):
        return {name: p.detach() for name, p in model.named_parameters(remove_duplicate=False)}
    from peft.tuners.lora import LoraLayer

    inner = base_model(model)
    deltas: dict[str, torch.Tensor] = {}
    for name, module in inner.named_modules():
        if isinstance(module, LoraLayer):
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    delta = module.get_delta_weight(adapter)
                    deltas[f"{name}.weight"] = deltas.get(f"{name}.weight", 0) + delta
    out: dict[str, torch.Tensor] = {}
    for name, p in inner.named_parameters(remove_duplicate=False):
        if ".lora_A." in name or ".lora_B." in name or ".lora_embedding_" in name:
            continue
        plain = name.replace(".base_layer.", ".")
        out[plain] = (p + deltas[plain].to(p.dtype)) if plain in deltas else p.detach()
    return out


def merges_lora(model) -> bool:
    """Whether a merged copy (:func:`merged_copy`) may stand in for ``model`` in forward-only passes: a PEFT LoRA
    model whose parameters are all float32 (in bfloat16 or float16, a merged weight's rounding would swallow an
    update smaller than its last bit, which the adapters' separate product keeps)."""
    return hasattr(model, "peft_config") and all(p.dtype == torch.float32 for p in model.parameters())


@torch.no_grad()
def merged_copy(model):
    """A plain Hugging Face model with ``model``'s architecture and its weights, LoRA adapters merged
    (:func:`merged_weights`), in eval mode and without gradients; ``model`` is left as it was.

    Parameters
    ----------
    model : peft.PeftModel
        A LoRA model.

    Returns
    -------
    transformers.PreTrainedModel
    """
    import copy

    plain = copy.deepcopy(model).merge_and_unload().eval()
    plain.requires_grad_(False)
    load_merged(plain, model)  # the very values merged_weights gives, whatever peft's merge rounds
    return plain


@torch.no_grad()
def load_merged(plain, model) -> None:
    """Copy ``model``'s merged weights (:func:`merged_weights`) into ``plain``, a :func:`merged_copy` of it."""
    params = dict(plain.named_parameters(remove_duplicate=False))
    for name, weight in merged_weights(model).items():
        params[name].copy_(weight)


def _vllm_dtype(model) -> str:
    dtype = next(model.parameters()).dtype
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]


def _load_weights(worker, weights) -> None:
    """Run in vLLM's worker: load ``{name: tensor}`` (Hugging Face names) into the running model."""
    runner = worker.model_runner
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    model.load_weights(weights=list(weights.items()))


class VLLMEngine:
    """A colocated vLLM engine (in this process, same GPU) that samples the trainer's current weights.

    Parameters
    ----------
    model
        The trainer's model (Hugging Face or PEFT LoRA) on a CUDA device; its config builds the engine
        and its weights are pushed in (:func:`merged_weights`).
    max_model_len : int
        Longest prompt plus response in tokens.
    gpu_memory_utilization : float
        Share of the GPU's memory the engine may take (weights, activations and KV cache).
    enforce_eager : bool
        Skip CUDA graphs and torch.compile (slower generation, faster start).
    seed : int
        Seed of the engine's sampler.

    Notes
    -----
    vLLM runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so weights go in as CUDA tensors
    without copies between processes. Without the flashinfer package, ``VLLM_USE_FLASHINFER_SAMPLER=0``
    is set (vLLM's sampler would otherwise import it and its engine would hang). Sampling is seeded per
    engine, not per request: vLLM rollouts are not bit-reproducible across runs (batch composition
    changes the kernels' arithmetic), as in verl.
    """

    name = "vllm"

    def __init__(self, model, *, max_model_len: int, gpu_memory_utilization: float = 0.3,
                 enforce_eager: bool = False, seed: int = 0) -> None:
        why = engine_problem("vllm", next(model.parameters()).device.type)
        if why is not None:
            raise EngineError(f"rollout_engine=vllm: {why}")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if importlib.util.find_spec("flashinfer") is None:
            os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        from vllm import LLM

        self._config_dir = tempfile.TemporaryDirectory(prefix="ocsd_vllm_")
        base_model(model).config.save_pretrained(self._config_dir.name)
        # the start-up profiles the GPU's free memory: no other process on the GPU moves memory meanwhile
        with device_share(next(model.parameters()).device).exclusive():
            self.llm = LLM(model=self._config_dir.name, load_format="dummy", skip_tokenizer_init=True,
                           dtype=_vllm_dtype(model), max_model_len=int(max_model_len),
                           gpu_memory_utilization=float(gpu_memory_utilization),
                           enforce_eager=bool(enforce_eager), enable_sleep_mode=True, seed=int(seed))
        self.asleep = False
        self.sync(model)

    def sync(self, model) -> None:
        """Push ``model``'s weights (LoRA merged) into the engine in memory; no cached prefix of the old
        weights survives (sleeping clears the prefix cache; an awake engine's is reset here)."""
        was_awake = not self.asleep
        self.wake(weights_only=True)
        self.llm.collective_rpc(_load_weights, kwargs={"weights": merged_weights(model)})
        if was_awake:
            self.llm.reset_prefix_cache()

    def wake(self, *, weights_only: bool = False) -> None:
        """Bring the weights (and, unless ``weights_only``, the KV cache) back to the GPU."""
        if not self.asleep:
            return
        torch.cuda.empty_cache()  # the trainer's cached free blocks would leave no room for the engine
        if weights_only:
            self.llm.wake_up(tags=["weights"])
            self.asleep = "kv_cache"
        else:
            self.llm.wake_up(tags=["kv_cache"] if self.asleep == "kv_cache" else None)
            self.asleep = False

    def sleep(self) -> None:
        """Free the KV cache and offload the weights to host memory (vLLM sleep level 1)."""
        if not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def _sampling(self, tokenizer, settings: GenerationSettings):
        """vLLM's sampling parameters for ``settings`` (greedy when ``settings.do_sample`` is false), the stop
        ids and the pad id."""
        from vllm import SamplingParams

        stops = stop_ids(tokenizer)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
        params = SamplingParams(
            n=1, max_tokens=settings.max_new_tokens, stop_token_ids=stops, detokenize=False,
            temperature=settings.temperature if settings.do_sample else 0.0,
            top_p=settings.top_p if settings.do_sample else 1.0, top_k=0 if settings.do_sample else -1)
        return params, stops, pad

    def responder(self, tokenizer, settings: GenerationSettings, seed: int) -> Responder:
        """Sample every turn's prompts in one vLLM call (greedy when ``settings.do_sample`` is false).

        ``seed`` is not used per request (see the class notes); the engine's own seed applies.
        """
        from vllm import TokensPrompt

        self.wake()
        params, stops, pad = self._sampling(tokenizer, settings)

        def respond(active: Sequence[int], prompts: Sequence[list[int]]) -> list[list[int]]:
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                                        use_tqdm=False)
            return [finished_ids(o.outputs[0], stops, pad) for o in outputs]

        return respond

    def stream(self, tokenizer, settings: GenerationSettings, seed: int) -> "VLLMStream":
        """Requests added to the running engine one by one, each response returned as soon as it ends."""
        self.wake()
        return VLLMStream(self.llm.llm_engine, *self._sampling(tokenizer, settings))

    def close(self) -> None:
        """Shut the engine down and free its GPU memory."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            del llm
            torch.cuda.empty_cache()
        if getattr(self, "_config_dir", None) is not None:
            self._config_dir.cleanup()
            self._config_dir = None


class VLLMStream:
    """A :class:`~training.rollout.loop.ResponseStream` over vLLM's engine loop (``LLMEngine.add_request`` and
    ``step``, what ``LLM.generate`` runs): prompts join the running batch whenever they are submitted.

    Parameters
    ----------
    engine : vllm.v1.engine.llm_engine.LLMEngine
    params : vllm.SamplingParams
        Every request's sampling (only the final output of each is returned).
    stops : sequence of int
        Stop token ids (:func:`finished_ids`).
    pad : int or None
    """

    def __init__(self, engine, params, stops: Sequence[int], pad: int | None) -> None:
        from vllm.sampling_params import RequestOutputKind

        self.engine = engine
        self.params = params.clone()
        self.params.output_kind = RequestOutputKind.FINAL_ONLY
        self.stops, self.pad = list(stops), pad
        self._keys: dict[str, int] = {}
        self._count = 0

    def submit(self, key: int, prompt: list[int]) -> None:
        from vllm import TokensPrompt

        request_id = f"ocsd-{self._count}"
        self._count += 1
        self._keys[request_id] = key
        self.engine.add_request(request_id, TokensPrompt(prompt_token_ids=list(prompt)), self.params)

    def pending(self) -> int:
        return len(self._keys)

    def poll(self) -> list[tuple[int, list[int]]]:
        """One step of the engine; the responses that finished in it."""
        return [(self._keys.pop(out.request_id), finished_ids(out.outputs[0], self.stops, self.pad))
                for out in self.engine.step() if out.finished and out.request_id in self._keys]

    def close(self) -> None:
        """Abort the requests not returned yet."""
        if self._keys:
            self.engine.abort_request(list(self._keys))
            self._keys = {}


def finished_ids(output, stops: Sequence[int], pad: int | None) -> list[int]:
    """Response ids of one vLLM completion, ending at the first stop token as :func:`generate`'s do.

    A completion that stopped on a stop token or EOS ends with that token (added when vLLM left it out);
    one cut at ``max_tokens`` keeps every token.
    """
    ids = list(output.token_ids)
    if output.finish_reason == "stop" and (not ids or ids[-1] not in stops):
        reason = output.stop_reason
        ids.append(reason if isinstance(reason, int) else stops[0])
    return trim_response(ids, set(stops), pad)


def make_engine(name: str, model, *, max_model_len: int, gpu_memory_utilization: float, enforce_eager: bool,
                seed: int) -> RolloutEngine:
    """The rollout engine called ``name`` (:data:`ENGINES`) for ``model``.

    Raises
    ------
    EngineError
        If ``name`` is unknown, or vLLM is asked for without CUDA or without the package.
    """
    if name == "hf":
        return HFEngine(model)
    if name == "vllm":
        return VLLMEngine(model, max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                          enforce_eager=enforce_eager, seed=seed)
    raise EngineError(f"rollout_engine={name!r}: must be one of {', '.join(ENGINES)}")


def response_token_count(trajs) -> int:
    """New tokens sampled in a rollout: the response tokens of every step."""
    return int(np.sum([len(s.response_ids) for t in trajs for s in t.steps]))
