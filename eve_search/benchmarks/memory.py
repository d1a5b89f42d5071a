"""``eve-search bench memory``: what EvE and a baseline hold in memory, counted and measured.

For each (model, optimizer) a fresh Python process builds the model, takes its baseline, runs 200
training iterations (EvE: 200 iterations of Algorithm 1; a baseline: 200 steps) on random batches,
and reports

* the tensor bytes the training state holds after the run, counted by storage (each storage once):
  the trained weights, their gradients, and everything else reachable from the optimizer object
  (its state, buffers, population, moments, bounds) -- :func:`training_state_bytes`;
* on the CPU, the peak resident memory above the process's baseline (taken once the model and the
  batches exist, before the optimizer is built) through the optimizer's construction and the
  iterations (the kernel's high-water mark, reset at the baseline through ``/proc/self/clear_refs``);
  on CUDA, ``torch.cuda.max_memory_allocated`` above the allocation at the baseline, and the absolute
  peak;

beside the theoretical count in units of the trained weights: Adam 4x (weights, gradient, two
moments), EvE 13x in the paper's count (weights, 4 population copies, 8 moment vectors; Appendix
"Vectorized Updates and Memory Cost") and 14x here, because the Adam fallback needs one gradient
buffer, which the paper's 4x for Adam counts and its 13x for EvE does not (this implementation
shares that buffer with the DE child).

A fresh process per measurement keeps one run's freed-but-cached memory out of the next one's
reading (the paper did the same with fresh CUDA contexts).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from eve_search._checks import InputError

__all__ = ["MODELS", "THEORY", "measure", "training_state_bytes"]

# Training-state storage in units of the trained weights, by the paper's count and by this package's.
THEORY = {"adam": {"paper": 4, "here": 4}, "eve": {"paper": 13, "here": 14}}
MODELS = ("mnist-mlp", "lora")


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    storage = t.untyped_storage()
    return str(t.device), storage.data_ptr()


def _tensors(root: Any, seen: set[int] | None = None) -> Iterable[torch.Tensor]:
    """Every tensor reachable from ``root`` through containers and the attributes of optimizer
    objects (torch.optim, eve_search, pytorch_optimizer classes), each object visited once."""
    seen = set() if seen is None else seen
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            yield obj
            if obj.grad is not None:
                stack.append(obj.grad)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, torch.nn.Module):
            continue  # the model is counted through the parameters the optimizer holds
        else:
            module = type(obj).__module__ or ""
            if module.startswith(("torch.optim", "eve_search", "pytorch_optimizer")):
                stack.extend(vars(obj).values() if hasattr(obj, "__dict__") else ())
                for slot in getattr(type(obj), "__slots__", ()):
                    if hasattr(obj, slot):
                        stack.append(getattr(obj, slot))


def training_state_bytes(params: list[torch.Tensor], optimizer: Any) -> dict[str, int]:
    """Bytes of the distinct storages behind the trained weights, their gradients, and the rest of
    what ``optimizer`` holds (anything already counted as weights or gradients is not counted again).

    ``optimizer_buffers`` are the optimizer's storages of more than one element (per-weight buffers),
    ``optimizer_scalars`` the one-element ones (step counters, per-tensor bounds).

    Args:
        params: the trained weights.
        optimizer: the optimizer training them (every tensor reachable from it is counted).

    Returns:
        Bytes of ``weights``, ``gradients``, ``optimizer_buffers``, ``optimizer_scalars`` and their ``total``.

    Example:
        >>> import torch
        >>> from eve_search import EvE
        >>> model = torch.nn.Linear(100, 100)
        >>> opt = EvE(model.parameters(), seed=0)
        >>> counts = training_state_bytes(list(model.parameters()), opt)
        >>> counts["optimizer_buffers"] // counts["weights"]
        13
    """
    weights: dict[tuple[str, int], int] = {}
    for p in params:
        weights[_storage_key(p)] = p.untyped_storage().nbytes()
    grads: dict[tuple[str, int], int] = {}
    for p in params:
        if p.grad is not None and _storage_key(p.grad) not in weights:
            grads[_storage_key(p.grad)] = p.grad.untyped_storage().nbytes()
    held: dict[tuple[str, int], tuple[int, bool]] = {}
    for t in _tensors(optimizer):
        key = _storage_key(t)
        if key not in weights and key not in grads:
            storage = t.untyped_storage()
            held[key] = (storage.nbytes(), storage.nbytes() > t.element_size())
    buffers = sum(nbytes for nbytes, is_buffer in held.values() if is_buffer)
    scalars = sum(nbytes for nbytes, is_buffer in held.values() if not is_buffer)
    return {"weights": sum(weights.values()), "gradients": sum(grads.values()), "optimizer_buffers": buffers,
            "optimizer_scalars": scalars,
            "total": sum(weights.values()) + sum(grads.values()) + buffers + scalars}


# One measurement (runs in its own process) --------------------------------------------------------


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


def _build(model_name: str, device: torch.device) -> tuple[torch.nn.Module, list[torch.Tensor], Any]:
    """(model, trained parameters, batch maker) for one of ``MODELS``."""
    generator = torch.Generator().manual_seed(0)
    if model_name == "mnist-mlp":
        from eve_search.tasks.models import mlp

        model = mlp(784, [1024, 1024], 10, generator=generator).to(device)
        xs = torch.rand(8, 256, 784, generator=generator).to(device)
        ys = torch.randint(0, 10, (8, 256), generator=generator).to(device)

        def loss(k: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(model(xs[k % 8]), ys[k % 8])

        return model, list(model.parameters()), loss
    if model_name == "lora":
        from eve_search.tasks.lora import adapter_parameters, lora_task

        task = lora_task()
        data = task.data()
        model = task.build_model({}, data, generator).to(device)
        x, y = data.x_train.to(device), data.y_train.to(device)
        batch = task.batch_size

        def lora_loss(k: int) -> torch.Tensor:
            start = (k * batch) % max(1, x.shape[0] - batch)
            return task.loss(model, x[start:start + batch], y[start:start + batch])

        return model, adapter_parameters(model), lora_loss
    raise InputError(f"Invalid model: {model_name!r} (expected one of {', '.join(MODELS)})")


def measure(model_name: str, optimizer_name: str, *, iterations: int = 200, device: str = "cpu") -> dict[str, Any]:
    """Run one measurement in this process (the command runs each in a fresh one).

    Args:
        model_name: one of ``MODELS`` (``"mnist-mlp"``, ``"lora"``).
        optimizer_name: a registered optimizer.
        iterations: the training iterations (EvE) or steps (a baseline) run.
        device: where to train (``"cpu"``: peak resident memory; ``"cuda"``: peak allocation).

    Returns:
        The model, optimizer, iterations, device, ``trained_weights``, dtype, the peak memory above
        the baseline, the counted training ``state`` (:func:`training_state_bytes`) and, for EvE,
        each slot's fallback steps.

    Raises:
        InputError: an unknown ``model_name``.

    Example:
        >>> result = measure("mnist-mlp", "adam", iterations=2)
        >>> result["trained_weights"], result["state"]["optimizer_buffers"] // result["state"]["weights"]
        (1863690, 2)
    """
    from eve_search.optim.budget import CostMeter
    from eve_search.optim import make_optimizer

    dev = torch.device(device)
    _model, params, loss = _build(model_name, dev)  # the loss closure keeps the model alive
    meter = CostMeter(mode="calibrated", backward_ratio=2.0)  # unlimited budget; charging is not measured here
    # The baseline is taken before the optimizer exists: EvE allocates its state when it is built, Adam
    # at its first step, so a baseline taken after construction would hide EvE's state and not Adam's.
    gc.collect()
    cpu = dev.type == "cpu"
    if cpu:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS high-water mark to the current RSS
        baseline_kib = _rss_kib("VmRSS")
    else:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        baseline_bytes = torch.cuda.memory_allocated(dev)
    optimizer = make_optimizer(optimizer_name, params, lr=1e-3, weight_decay=5e-4, meter=meter, seed=0)
    for k in range(iterations):
        optimizer.step(lambda k=k: loss(k))
    result: dict[str, Any] = {"model": model_name, "optimizer": optimizer_name, "iterations": iterations,
                              "device": str(dev), "trained_weights": sum(p.numel() for p in params),
                              "dtype": str(params[0].dtype)}
    if cpu:
        result["peak_above_baseline_bytes"] = (_rss_kib("VmHWM") - baseline_kib) * 1024
        result["baseline_rss_bytes"] = baseline_kib * 1024
    else:
        torch.cuda.synchronize(dev)
        result["peak_above_baseline_bytes"] = torch.cuda.max_memory_allocated(dev) - baseline_bytes
        result["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
    result["state"] = training_state_bytes(params, optimizer)
    population = getattr(optimizer, "population", None)
    if population is not None:  # EvE: did every slot's fallback fire (so its moments are all live)?
        result["fallback_steps_per_slot"] = [int(s) for s in population.adam_steps]
    return result


def _child_main() -> None:
    spec = json.loads(sys.argv[1])
    torch.set_num_threads(spec.get("threads") or torch.get_num_threads())
    print(json.dumps(measure(spec["model"], spec["optimizer"], iterations=spec["iterations"], device=spec["device"])))


def _in_fresh_process(spec: dict[str, Any]) -> dict[str, Any]:
    code = "from eve_search.benchmarks.memory import _child_main; _child_main()"
    # In an empty folder of its own: ``-c`` puts the working directory first on sys.path, so an
    # ``eve_search`` folder or file there would be imported instead of this package.
    with tempfile.TemporaryDirectory(prefix="eve-bench-memory-") as folder:
        done = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True,
                              check=False, cwd=folder)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"memory measurement of {spec['optimizer']} on {spec['model']} failed: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


