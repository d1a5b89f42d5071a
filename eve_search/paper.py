"""The paper's grids and reference figures, each in one place (paper: /work/shared/paper/eve-paper.tex).

A leaf: imports nothing from eve_search, so every layer can read it.
"""

__all__ = ["PAPER_LORA", "PAPER_LR_GRID", "PAPER_MNIST", "PAPER_TAUS", "PAPER_TOP_RANKS"]

#: The learning-rate grid of the paper's protocols (Section "Experimental Setup"): every optimizer
#: is trained at each of these rates.
PAPER_LR_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)

# The paper's MNIST figures (Section "Neural Network Training: MLP on MNIST", Appendix "Training-Time
# Summary" and Table "Effect of choosing each method's learning rate"): it gives EvE's numbers and,
# for the baselines, only ranges over the Adam family (accuracy) and over all eight (wall time).
_BASELINE_WALL = "182.3-192.3 (8-baseline range)"
_ADAM_FAMILY = {"lr": "-", "test": "98.0-98.2% (Adam-family range)", "wall": _BASELINE_WALL}
PAPER_MNIST: dict[str, dict[str, str]] = {
    "eve": {"lr": "1e-3", "test": "97.03%", "wall": "49.3"},
    **{name: _ADAM_FAMILY for name in ("adam", "adamw", "nadam", "radam", "amsgrad", "adabelief", "lookahead")},
    "sgd_momentum": {"lr": "-", "test": "close to EvE's 97.0% (no figure)", "wall": _BASELINE_WALL},
}

# Paper, Table tab:rank-agreement: rung-1 tau-b, mean and std over 5 seeds, per space.
PAPER_TAUS = {
    ("eve", "adam", "same"): {"hp": (0.663, 0.093), "arch": (0.691, 0.032)},
    ("eve", "adamw", "same"): {"hp": (0.677, 0.063), "arch": (0.709, 0.041)},
    ("adam", "adam", "next"): {"hp": (0.694, 0.061), "arch": (0.670, 0.029)},
    ("adam", "adamw", "same"): {"hp": (0.714, 0.078), "arch": (0.848, 0.018)},
}
# Paper: rank under Adam of EvE's rung-1 top configuration, per seed 0-4.
PAPER_TOP_RANKS = {"hp": [4, 5, 3, 10, 2], "arch": [5, 4, 3, 16, 6]}

# The paper's LoRA/Alpaca figures (Section "Real-World Fine-Tuning: LoRA", Appendix "LoRA/Alpaca",
# Table "Effect of choosing each method's learning rate"). Per baseline it gives only ranges: the
# Adam family's test loss 1.115-1.124, every baseline's wall time 58.8-70.7 s; best rates 1e-4 for
# most of the Adam family, 3e-4 for RAdam and Lookahead; nothing per method for SGD.
_ADAM_TEST = "1.115-1.124 (Adam family)"
_BASELINE_WALL = "58.8-70.7 (8 baselines)"
PAPER_LORA: dict[str, dict[str, str]] = {
    "eve": {"lr": "3e-4", "test": "1.240 +- 0.046", "wall": "35.0 +- 0.6"},
    **{name: {"lr": "1e-4", "test": _ADAM_TEST, "wall": _BASELINE_WALL}
       for name in ("adam", "adamw", "nadam", "amsgrad", "adabelief")},
    **{name: {"lr": "3e-4", "test": _ADAM_TEST, "wall": _BASELINE_WALL} for name in ("radam", "lookahead")},
    "sgd_momentum": {"lr": "-", "test": "- (no figure)", "wall": _BASELINE_WALL},
}
