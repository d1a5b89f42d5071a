"""The same Adult sweep through the local engine and through Ray Tune, side by side, plus Ray's own
ASHA and HyperBand schedulers on the same configurations.

    python searches/ray_vs_local.py                     # 48 configurations of the arch space, seed 0
    python searches/ray_vs_local.py --space hp --json ray_vs_local.json

Both eve-search backends train the same configurations from the same seeds under the same pinned
backward/forward ratio, so they must agree exactly on every rung, promotion and validation score
(checked, printed). Wall seconds cover the sweep (calibration, training, evaluations, checkpoints,
store writes); Ray's start-up (``ray.init``) is timed apart and excluded. Training seconds are the
trials' own time inside ``train_to``. ASHA and HyperBand run on the same trainable with their usual
settings (grace period 100 units, reduction factor 3, max_t = the last rung): they are reported for
the units they train and their wall time, since neither can run synchronous successive halving.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from eve_search.integrations.ray import EveTrainable, run_sweep_on_ray
from eve_search.engine.sweep import SweepSettings, prepare_sweep


def _sweep(settings: SweepSettings, root: Path, name: str):
    return prepare_sweep(settings, storage=f"sqlite:///{root / name}.db", checkpoint_dir=root / name)


def _agree(local, remote) -> bool:
    keys = ("rungs", "trials", "best", "winner", "charged_units", "backward_ratios")
    return all(getattr(local, k) == getattr(remote, k) for k in keys)


def _ray_scheduler_run(tune, sweep, scheduler, rungs, root: Path, name: str) -> dict:
    """One Tune run of the sweep's configurations under one of Ray's schedulers."""
    s = sweep.settings
    configs = sweep.configs
    space = {"trial_index": tune.grid_search(list(range(len(configs))))}
    for key in configs[0]:
        space[key] = tune.sample_from(lambda config, key=key: configs[config["trial_index"]][key])
    trainable = tune.with_parameters(EveTrainable, task=sweep.task, optimizer=s.optimizer, rungs=rungs,
                                     seed=s.seed, cost_mode=s.cost_mode, backward_ratios=dict(sweep.ratios))
    tuner = tune.Tuner(trainable, param_space=space,
                       tune_config=tune.TuneConfig(metric=sweep.task.metric, mode=sweep.task.mode,
                                                   scheduler=scheduler, reuse_actors=True),
                       run_config=tune.RunConfig(name=name, storage_path=str(root / "tune"), verbose=0))
    started = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - started
    finals = [r.metrics for r in grid if r.metrics]
    return {"wall_seconds": wall, "units": sum(m["eval_cost"] for m in finals),
            "training_seconds": sum(m["wall_seconds"] for m in finals),
            "best": max(m["accuracy"] for m in finals), "errors": len(grid.errors)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="arch", choices=("hp", "arch"))
    parser.add_argument("--configs", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--optimizer", default="eve")
    parser.add_argument("--backward-ratio", type=float, default=2.0,
                        help="pinned backward/forward ratio, so both backends charge identically (default 2.0)")
    parser.add_argument("--local-threads", type=int, metavar="N",
                        help="torch threads of the local engine (default: torch's own choice, one per core); "
                             "each Ray actor runs one thread per CPU it reserves")
    parser.add_argument("--skip-ray-schedulers", action="store_true", help="leave out ASHA and HyperBand")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler

    settings = SweepSettings(task="adult", space=args.space, optimizer=args.optimizer, seed=args.seed,
                             configs=args.configs, backward_ratio=args.backward_ratio)
    root = Path(tempfile.mkdtemp(prefix="ray-vs-local-"))
    figures: dict = {"settings": settings.as_dict()}

    import torch

    default_threads = torch.get_num_threads()
    if args.local_threads:
        torch.set_num_threads(args.local_threads)
    figures["local_threads"] = torch.get_num_threads()
    local_sweep = _sweep(settings, root, "local")
    started = time.perf_counter()
    local = local_sweep.run()
    figures["local"] = {"wall_seconds": time.perf_counter() - started, "training_seconds": local.training_seconds,
                        "units": local.charged_units}

    torch.set_num_threads(default_threads)
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    figures["ray_init_seconds"] = time.perf_counter() - started
    remote_sweep = _sweep(settings, root, "ray")
    started = time.perf_counter()
    remote = run_sweep_on_ray(remote_sweep)
    figures["ray"] = {"wall_seconds": time.perf_counter() - started, "training_seconds": remote.training_seconds,
                      "units": remote.charged_units}
    figures["identical"] = _agree(local, remote)

    if not args.skip_ray_schedulers:
        rungs = settings.rungs
        asha = ASHAScheduler(time_attr="eval_cost", max_t=rungs[-1], grace_period=rungs[0], reduction_factor=3)
        figures["asha"] = _ray_scheduler_run(tune, remote_sweep, asha, rungs, root, "asha")
        hyperband = HyperBandScheduler(time_attr="eval_cost", max_t=rungs[-1], reduction_factor=3)
        fine = tuple(range(100, rungs[-1] + 1, 100))
        figures["hyperband"] = _ray_scheduler_run(tune, remote_sweep, hyperband, fine, root, "hyperband")
    ray.shutdown()

    loc, ray_ = figures["local"], figures["ray"]
    print(f"{args.configs} configurations, {args.space} space, {args.optimizer}, seed {args.seed}, rungs "
          f"{'/'.join(str(r) for r in settings.rungs)}, backward ratio {args.backward_ratio}")
    print(f"{'run':<28}{'wall s':>9}{'train s':>9}{'units':>10}")
    print(f"{'local engine, ' + str(figures['local_threads']) + ' thread(s)':<28}{loc['wall_seconds']:>9.1f}{loc['training_seconds']:>9.1f}{loc['units']:>10.0f}")
    print(f"{'Ray, synchronous SHA':<28}{ray_['wall_seconds']:>9.1f}{ray_['training_seconds']:>9.1f}"
          f"{ray_['units']:>10.0f}")
    for key, label in (("asha", "Ray, ASHAScheduler"), ("hyperband", "Ray, HyperBandScheduler")):
        if key in figures:
            f = figures[key]
            print(f"{label:<28}{f['wall_seconds']:>9.1f}{f['training_seconds']:>9.1f}{f['units']:>10.0f}"
                  f"   best val acc {f['best']:.4f}")
    print(f"Ray / local: wall {ray_['wall_seconds'] / loc['wall_seconds']:.2f}x, training "
          f"{ray_['training_seconds'] / loc['training_seconds']:.2f}x (ray.init {figures['ray_init_seconds']:.1f} s, "
          "excluded)")
    print(f"identical rungs, promotions, scores and winner: {'yes' if figures['identical'] else 'NO'}; "
          f"best val acc {remote.best['score']:.4f}, winner test acc {remote.winner['test']['accuracy']:.4f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    return 0 if figures["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
