"""EvE in the training scripts torch users already have.

Each test is one thing such a script does: checkpoints that hold only the model, weights changed
between steps, LBFGS-style closures, parameter groups, schedulers, dropout, zero_grad, frozen,
sparse and complex parameters. Each either works or is refused in one line.
"""

import io
import math
import pathlib
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eve_search import CostMeter, EvE
from eve_search.optim import ClosureContractError
from eve_search.optim._population import EvEHyperparameters, Layout, Population


def classification(seed, rows=256):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 8, generator=g)
    y = (x[:, 0] - 0.5 * x[:, 1] + 0.25 * x[:, 2] > 0).long()
    return x, y


TRAIN, VAL = classification(0), classification(1)


def net(seed=0, dropout=0.0):
    torch.manual_seed(seed)  # only to build the module
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                               torch.nn.Linear(32, 2))


def loss(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def val_loss(model):
    with torch.no_grad():
        return loss(model, *VAL).item()


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train(model, opt, steps, batch_seed):
    """``steps`` EvE steps on fresh minibatches; returns the last step's value."""
    x, y = TRAIN
    g = torch.Generator().manual_seed(batch_seed)
    best = math.nan
    for _ in range(steps):
        i = torch.randint(0, x.shape[0], (32,), generator=g)
        xb, yb = x[i], y[i]
        best = opt.step(lambda: loss(model, xb, yb))
    return best


def evaluated_weights(model, opt, x, y):
    """One step whose closure records the weights of every evaluation; returns (value, weights seen)."""
    seen = []

    def closure():
        seen.append(flat(model).clone())
        return loss(model, x, y)

    return opt.step(closure), seen


def reanchored_at(weights, opt, seen):
    """The step scored a fresh population whose slot 1 is ``weights`` (mapped into the unit cube and
    back, so equal up to rounding) and whose other slots are proximity jitters of it."""
    population = opt.population
    z0 = population.to_unit(weights.clone(), out=torch.empty_like(weights))
    assert torch.equal(seen[0], population.to_real(z0, out=torch.empty_like(weights)))
    torch.testing.assert_close(seen[0], weights, rtol=0, atol=1e-6)
    assert len(seen) >= 5  # all four slots, then the child
    for other in seen[1:4]:
        jitter = (population.to_unit(other, out=torch.empty_like(weights)) - z0).abs().mean().item()
        assert 0.02 < jitter < 0.1  # sigma = 0.1, clamped: mean |N(0, 0.1)| is 0.08
    return True


class ModelOnlyTrainable:
    """The shape of a Ray Tune class Trainable whose checkpoints hold only ``model.state_dict()``
    (setup / step / save_checkpoint / load_checkpoint / reset_config), run here without Ray."""

    def __init__(self, config, init_seed=0):
        self.setup(config, init_seed)

    def setup(self, config, init_seed):
        self.model = net(init_seed)
        self.optimizer = EvE(self.model.parameters(), lr=config["lr"], seed=config["seed"])
        self.iteration = 0

    def step(self, batches=20):
        train(self.model, self.optimizer, batches, batch_seed=1000 + self.iteration)
        self.iteration += 1
        return {"val_loss": val_loss(self.model)}

    def save_checkpoint(self, directory):
        path = pathlib.Path(directory) / "model.pt"
        torch.save(self.model.state_dict(), path)
        return str(path)

    def load_checkpoint(self, path):
        self.model.load_state_dict(torch.load(path, weights_only=True))

    def reset_config(self, config):
        for group in self.optimizer.param_groups:
            group["lr"] = config["lr"]
        return True


# --------------------------------------------------------------------- checkpoints holding only the model


def test_a_model_only_checkpoint_restored_into_a_new_model_and_eve_continues_from_its_weights(tmp_path):
    first = ModelOnlyTrainable({"lr": 1e-2, "seed": 0})
    for _ in range(10):
        saved_val = first.step()["val_loss"]
    path = first.save_checkpoint(tmp_path)

    restored = ModelOnlyTrainable({"lr": 1e-2, "seed": 0}, init_seed=7)  # a new actor: fresh weights
    assert val_loss(restored.model) > 2 * saved_val  # the fresh model is far from the checkpoint
    restored.load_checkpoint(path)
    assert val_loss(restored.model) == saved_val

    x, y = TRAIN
    xb, yb = x[:32], y[:32]
    loaded = flat(restored.model).clone()
    loaded_batch_loss = loss(restored.model, xb, yb).item()
    best, seen = evaluated_weights(restored.model, restored.optimizer, xb, yb)
    # The population was rebuilt around the loaded weights (slot 1 is them), so the first step can
    # only do as well or better on its batch: it cannot jump to the stale population's best member.
    after_one_step = val_loss(restored.model)
    assert after_one_step < 1.25 * saved_val + 0.01  # a stale population would lose accuracy here
    assert best <= loaded_batch_loss + 1e-5
    assert loss(restored.model, xb, yb).item() == pytest.approx(best, abs=1e-6)
    assert restored.optimizer.reanchors == 1
    assert reanchored_at(loaded, restored.optimizer, seen)
    # and training goes on from there
    for _ in range(5):
        later = restored.step()["val_loss"]
    assert later < 1.25 * saved_val + 0.01
    assert restored.optimizer.reanchors == 1  # nothing else changed the weights


def test_reusing_the_optimizer_after_load_state_dict_reanchors_around_the_loaded_weights(tmp_path):
    # Ray's reset_config / PBT "exploit": the same actor, model and optimizer get another trial's weights.
    actor = ModelOnlyTrainable({"lr": 1e-2, "seed": 3})
    for _ in range(5):
        actor.step()
    donor = ModelOnlyTrainable({"lr": 1e-2, "seed": 4}, init_seed=11)
    for _ in range(3):
        donor.step()
    path = donor.save_checkpoint(tmp_path)
    stale_best = flat(actor.model).clone()

    assert actor.reset_config({"lr": 3e-3})
    actor.load_checkpoint(path)
    loaded = flat(actor.model).clone()
    opt = actor.optimizer
    iteration = opt.population.iteration
    x, y = TRAIN
    xb, yb = x[32:64], y[32:64]
    loaded_batch_loss = loss(actor.model, xb, yb).item()
    best, seen = evaluated_weights(actor.model, opt, xb, yb)

    population = opt.population
    assert opt.reanchors == 1
    assert population.iteration == iteration + 1  # the iteration counter runs on
    assert population.hyper.lr == 3e-3
    assert reanchored_at(loaded, opt, seen)
    assert best <= loaded_batch_loss + 1e-5
    # nowhere near the stale population's best
    moved = flat(actor.model)
    assert (moved - loaded).norm() < (moved - stale_best).norm()


def _load_state_dict(model, source):
    model.load_state_dict(source.state_dict())


def _copy_through_data(model, source):
    for p, q in zip(model.parameters(), source.parameters()):
        p.data.copy_(q.data)


def _assign_under_no_grad(model, source):
    with torch.no_grad():
        for p, q in zip(model.parameters(), source.parameters()):
            p[...] = q


def _replace_data(model, source):
    for p, q in zip(model.parameters(), source.parameters()):
        p.data = q.detach().clone()


def _init_in_place(model, source):
    del source
    torch.manual_seed(5)
    for layer in (model[0], model[3]):
        layer.reset_parameters()


@pytest.mark.parametrize("change", [_load_state_dict, _copy_through_data, _assign_under_no_grad, _replace_data,
                                    _init_in_place])
def test_every_way_of_changing_the_weights_outside_step_is_seen(change):
    model = net()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    train(model, opt, 12, batch_seed=0)
    change(model, net(seed=21))
    changed = flat(model).clone()
    assert opt.reanchors == 0
    _, seen = evaluated_weights(model, opt, *TRAIN)
    assert opt.reanchors == 1
    assert reanchored_at(changed, opt, seen)
    population = opt.population
    # The module's parameters still view EvE's buffer (p.data = ... was re-bound), so steps reach it.
    train(model, opt, 5, batch_seed=1)
    assert torch.equal(flat(model), population.to_real(population.z[population.best_index],
                                                       out=torch.empty_like(changed)))


def test_a_change_before_the_first_step_is_seen_too():
    # setup() builds model and optimizer, then load_checkpoint() loads weights: the population that
    # the constructor anchored at the fresh weights is stale before it was ever used.
    model = net()
    opt = EvE(model.parameters(), seed=0)
    model.load_state_dict(net(seed=9).state_dict())
    loaded = flat(model).clone()
    _, seen = evaluated_weights(model, opt, *TRAIN)
    assert opt.reanchors == 1
    assert reanchored_at(loaded, opt, seen)


def test_weights_that_were_only_read_never_reanchor():
    model = net()
    opt = EvE(model.parameters(), lr=1e-2, seed=0, meter=CostMeter(250, mode="calibrated", backward_ratio=2.0))
    for _ in range(6):
        train(model, opt, 8, batch_seed=len(str(opt.population.iteration)))
        model.eval()
        val_loss(model)
        model.train()
        model.load_state_dict(model.state_dict())  # the same bits written back
        opt.zero_grad()
    while not opt.meter.exhausted:
        train(model, opt, 1, batch_seed=2)
    train(model, opt, 3, batch_seed=2)  # steps on a spent budget evaluate nothing
    assert opt.reanchors == 0


@pytest.mark.parametrize("extra", [0, 1])  # 8-byte words compared (an even count of float32), or 4-byte words
def test_one_flipped_bit_in_any_weight_is_seen(extra):
    """The check that the module still holds what EvE wrote compares bits, whatever word size it reads
    them in: the lowest bit or the sign bit of the first, a middle or the last weight."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4 + extra), torch.nn.ReLU(), torch.nn.Linear(4 + extra, 2))
    sizes = [p.numel() for p in model.parameters()]
    n = sum(sizes)
    assert n % 2 == extra
    for position in (0, n // 2, n - 1):
        for mask in (1, -2 ** 31):  # the lowest bit; the sign bit (0.0 and -0.0 are equal only as numbers)
            opt = EvE(model.parameters(), lr=1e-2, seed=0)
            train(model, opt, 6, batch_seed=0)
            k = next(k for k in range(len(sizes)) if position < sum(sizes[:k + 1]))
            bits = list(model.parameters())[k].data.view(-1).view(torch.int32)  # bypasses autograd's counters
            bits[position - sum(sizes[:k])] ^= mask
            train(model, opt, 1, batch_seed=1)
            assert opt.reanchors == 1, (position, mask)


def test_lhs_and_uniform_populations_ignore_the_weights_until_a_step_has_written_them():
    for kwargs in ({"init": "lhs"}, {"anchor": "uniform"}):
        model = net()
        opt = EvE(model.parameters(), seed=0, **kwargs)
        z = opt.population.z.clone()
        model.load_state_dict(net(seed=9).state_dict())
        opt.step(lambda: loss(model, *TRAIN))
        assert opt.reanchors == 0
        changed = z.ne(opt.population.z).any(dim=1)
        assert int(changed.sum()) <= 1  # at most the challenged slot took a candidate
        # once the module holds the population's best member, a change re-anchors by proximity
        model.load_state_dict(net(seed=9).state_dict())
        opt.step(lambda: loss(model, *TRAIN))
        assert opt.reanchors == 1


def test_a_change_at_every_step_warns_once():
    model = net()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    train(model, opt, 4, batch_seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            with torch.no_grad():
                for p in model.parameters():
                    p.clamp_(-0.05, 0.05)  # a weight constraint applied between steps
            train(model, opt, 1, batch_seed=1)
    repeated = [w for w in caught if "two consecutive steps" in str(w.message)]
    assert len(repeated) == 1
    assert opt.reanchors == 5


def _save(model, opt):
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "meter": opt.meter.state_dict()}, buffer)
    buffer.seek(0)
    return buffer


def _restore(buffer, init_seed):
    saved = torch.load(buffer, weights_only=True)
    model = net(init_seed)
    opt = EvE(model.parameters(), lr=1e-2, seed=init_seed, meter=CostMeter(mode="calibrated", backward_ratio=2.0))
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    opt.meter.load_state_dict(saved["meter"])
    return model, opt


@pytest.mark.parametrize("save_at", ["after_steps", "between_reanchor_and_its_first_step", "before_any_step"])
def test_saving_model_and_optimizer_together_stays_bit_exact_across_reanchors(save_at):
    model = net()
    opt = EvE(model.parameters(), lr=1e-2, seed=2, meter=CostMeter(mode="calibrated", backward_ratio=2.0))
    if save_at != "before_any_step":
        train(model, opt, 15, batch_seed=0)
        model.load_state_dict(net(seed=30).state_dict())  # a reanchor happens before the save...
        if save_at == "after_steps":
            train(model, opt, 6, batch_seed=1)
    buffer = _save(model, opt)
    train(model, opt, 10, batch_seed=2)
    model.load_state_dict(net(seed=31).state_dict())  # ...and another one after it
    train(model, opt, 10, batch_seed=3)

    model_b, opt_b = _restore(buffer, init_seed=77)
    train(model_b, opt_b, 10, batch_seed=2)
    model_b.load_state_dict(net(seed=31).state_dict())
    train(model_b, opt_b, 10, batch_seed=3)

    assert torch.equal(flat(model), flat(model_b))
    assert torch.equal(opt.population.z, opt_b.population.z)
    assert opt.population.values == opt_b.population.values
    assert opt.reanchors == opt_b.reanchors == (1 if save_at == "before_any_step" else 2)
    assert opt.meter.cost == opt_b.meter.cost


def test_a_state_dict_without_reanchor_counters_loads_and_continues():
    model = net()
    opt = EvE(model.parameters(), lr=1e-2, seed=2)
    train(model, opt, 6, batch_seed=0)
    state = opt.state_dict()
    for key in ("holds", "reanchors"):
        del state["state"]["eve"][key]
    model_b = net(seed=5)
    opt_b = EvE(model_b.parameters(), lr=1e-2, seed=2)
    opt_b.load_state_dict(state)
    train(model, opt, 4, batch_seed=1)
    train(model_b, opt_b, 4, batch_seed=1)
    assert torch.equal(flat(model), flat(model_b)) and opt_b.reanchors == 0


_ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("step"), st.integers(0, 3)),
    st.tuples(st.just("load"), st.integers(40, 43)),  # model.load_state_dict of other weights
    st.tuples(st.just("copy"), st.integers(40, 43)),  # p.data.copy_ of other weights
    st.tuples(st.just("same"), st.just(0)),  # the model's own state written back: no change
    st.tuples(st.just("resume"), st.booleans()),  # full state into a new model and EvE (True: optimizer first)
), min_size=1, max_size=12)


@pytest.mark.filterwarnings("ignore:EvE re-anchored its population at two consecutive steps")
@settings(max_examples=20, deadline=None)
@given(_ACTIONS)
def test_no_step_ever_continues_from_a_stale_population_and_full_resumes_change_nothing(actions):
    def run(resume):
        model = net()
        opt = EvE(model.parameters(), lr=1e-2, seed=1)
        pending, reanchors = None, 0
        for action, arg in actions:
            if action == "step":
                x, y = classification(arg, rows=32)
                _, seen = evaluated_weights(model, opt, x, y)
                if pending is not None:
                    reanchors += 1
                    torch.testing.assert_close(seen[0], pending, rtol=0, atol=1e-6)
                    pending = None
                assert opt.reanchors == reanchors
                population = opt.population
                best = population.to_real(population.z[population.best_index], out=torch.empty_like(seen[0]))
                assert torch.equal(flat(model), best)
            elif action in ("load", "copy"):
                source = net(arg)
                (_load_state_dict if action == "load" else _copy_through_data)(model, source)
                pending = flat(source)
            elif action == "same":
                model.load_state_dict(model.state_dict())
            elif resume:
                buffer = io.BytesIO()
                torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
                buffer.seek(0)
                saved = torch.load(buffer, weights_only=True)
                model, opt = net(seed=99), None
                opt = EvE(model.parameters(), lr=1e-2, seed=5)
                loads = [lambda: opt.load_state_dict(saved["opt"]), lambda: model.load_state_dict(saved["model"])]
                for load in loads if arg else reversed(loads):
                    load()
        return flat(model), opt.reanchors

    resumed, resumed_reanchors = run(resume=True)
    straight, straight_reanchors = run(resume=False)
    assert torch.equal(resumed, straight) and resumed_reanchors == straight_reanchors


# --------------------------------------------------------------------------------- the closure contract


def test_an_lbfgs_style_closure_gets_the_closure_contract_in_one_line():
    model = net()
    opt = EvE(model.parameters())

    def lbfgs_closure():
        opt.zero_grad()
        value = loss(model, *TRAIN)
        value.backward()
        return value

    with pytest.raises(ClosureContractError) as raised:
        opt.step(lbfgs_closure)
    message = str(raised.value)
    assert "\n" not in message
    assert "remove optimizer.zero_grad() and loss.backward()" in message
    assert "torch.inference_mode()" in message and "calls backward() on the returned loss itself" in message
    assert "does not require grad" not in message
    assert isinstance(raised.value, RuntimeError)  # `except RuntimeError` in user code still catches it


def test_a_closure_that_calls_backward_only_when_grad_is_enabled_gets_the_contract_too():
    model = net()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)

    def closure():
        value = loss(model, *TRAIN)
        if torch.is_grad_enabled():  # the guard some LBFGS closures carry
            opt.zero_grad()
            value.backward()
        return value

    with pytest.raises(ClosureContractError, match="closure already called backward"):
        for _ in range(20):  # scoring works; the first fallback step meets the backward
            opt.step(closure)


def test_zero_grad_inside_the_closure_changes_nothing():
    def run(zero_grad_inside):
        model = net()
        opt = EvE(model.parameters(), lr=1e-2, seed=0)

        def closure():
            if zero_grad_inside:
                opt.zero_grad(set_to_none=True)
            return loss(model, *TRAIN)

        for _ in range(12):
            opt.step(closure)
        return flat(model), opt.population.exp_avg.clone()

    with_zero_grad, moments = run(True)
    without, moments_without = run(False)
    assert moments.abs().sum() > 0  # the fallback got its gradients
    assert torch.equal(with_zero_grad, without) and torch.equal(moments, moments_without)


def test_step_without_a_closure_says_how_to_write_one():
    model = net()
    opt = EvE(model.parameters())
    loss(model, *TRAIN).backward()
    with pytest.raises(TypeError, match=r"EvE.step needs a closure .*opt.step\(lambda: loss_fn\(model\(x\), y\)\)"):
        opt.step()


# ------------------------------------------------------------------------------ what else torch users do


def test_two_param_groups_with_equal_settings_match_one_group_bit_for_bit():
    def run(groups):
        model = net()
        params = ([{"params": model[0].parameters()}, {"params": model[3].parameters()}] if groups
                  else model.parameters())
        opt = EvE(params, lr=1e-2, weight_decay=1e-4, seed=4)
        train(model, opt, 16, batch_seed=0)
        return flat(model)

    assert torch.equal(run(True), run(False))


def test_each_param_group_steps_with_its_own_lr_and_weight_decay():
    n = 3
    z = torch.tensor([[0.6, 0.7, 0.8], [0.5, 0.5, 0.5], [0.9, 0.2, 0.4], [0.3, 0.3, 0.9]], dtype=torch.float64)
    lower, upper = -torch.ones(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64)
    hyper = EvEHyperparameters(n_adam=1, F=0.5, gamma=0.0)
    settings = [(0.1, 0.01), (0.0, 0.0)]
    population = Population(z.clone(), lower, upper, hyper, torch.Generator().manual_seed(0), refresh=False,
                            work=torch.empty(n, dtype=torch.float64), layout=Layout(groups=[2, 1]))
    population.group_settings = settings

    class Quadratic:  # f(x) = |x|^2; the child always loses to the slots, so every iteration falls back
        at = None

        def exhausted(self):
            return False

        def score(self, rows):
            return [0.0] * rows.shape[0] if rows.shape[0] == 4 else [math.inf] * rows.shape[0]

        def score_work(self):
            return float((population.work ** 2).sum())

        def gradient(self, x):
            self.at = x.clone()  # the child, in real coordinates
            return float((x ** 2).sum()), 2 * x

    evaluator = Quadratic()
    population.iterate(evaluator)
    x = evaluator.at
    lr, wd = settings[0]
    g = 2 * x[:2] + wd * x[:2]  # the gradient plus the folded L2 term
    m_hat, v_hat = 0.1 * g / (1 - 0.9), 0.001 * g * g / (1 - 0.999)
    torch.testing.assert_close(population.work[:2], (x[:2] - lr * m_hat / (v_hat.sqrt() + 1e-8)).clamp(-1, 1),
                               rtol=1e-12, atol=1e-12)
    assert not torch.equal(population.work[:2], x[:2])
    assert population.work[2] == x[2]  # lr 0: this group's weight did not move
    assert [int(step) for step in population.adam_steps] == [1, 0, 0, 0]  # one step count per slot


def test_a_scheduler_on_the_groups_reaches_the_fallback_at_every_step():
    model = net()
    opt = EvE([{"params": model[0].parameters(), "lr": 1e-2},
               {"params": model[3].parameters(), "lr": 1e-3, "weight_decay": 1e-4}], seed=0)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
    seen, expected = [], []
    x, y = TRAIN

    def closure():
        seen.append(tuple(opt.population.group_settings))
        return loss(model, x[:32], y[:32])

    for _ in range(6):
        expected.append(tuple((g["lr"], g["weight_decay"]) for g in opt.param_groups))
        calls = len(seen)
        opt.step(closure)
        assert set(seen[calls:]) == {expected[-1]}  # every evaluation of the step used the current lrs
        scheduler.step()
    assert expected[0] == ((1e-2, 0.0), (1e-3, 1e-4)) and expected[-1][0][0] < 1e-3
    assert opt.population.hyper.lr == expected[-1][0][0]


def test_step_lr_on_a_single_group():
    model = net()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
    used = []
    for _ in range(5):
        opt.step(lambda: used.append(opt.population.hyper.lr) or loss(model, *TRAIN))
        scheduler.step()
    assert sorted(set(used), reverse=True) == pytest.approx([1e-2, 1e-3, 1e-4])


def test_an_invalid_group_lr_is_named_with_its_group():
    model = net()
    with pytest.raises(ValueError, match=r"param group 1: Invalid learning rate: -0.1"):
        EvE([{"params": model[0].parameters()}, {"params": model[3].parameters(), "lr": -0.1}])
    opt = EvE([{"params": model[0].parameters()}, {"params": model[3].parameters()}])
    opt.param_groups[1]["lr"] = float("nan")
    with pytest.raises(ValueError, match=r"param group 1: Invalid learning rate: nan"):
        opt.step(lambda: loss(model, *TRAIN))


def test_add_param_group_after_construction_is_refused():
    model = net()
    opt = EvE(model[0].parameters())
    with pytest.raises(ValueError, match=r"EvE cannot add a parameter group after construction"):
        opt.add_param_group({"params": model[3].parameters()})
    assert len(opt.param_groups) == 1


def test_dropout_masks_are_common_to_every_evaluation_of_a_step():
    model = net(dropout=0.5)
    model.train()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    masks, modes = [], []

    def closure():
        masks.append(model[2](torch.ones(1, 32)))
        modes.append(model.training)
        return loss(model, *TRAIN)

    start = torch.get_rng_state()
    opt.step(closure)
    first_step = masks[:]
    assert len(first_step) >= 5  # four slots and the child at least
    assert all(torch.equal(m, first_step[0]) for m in first_step)
    assert all(modes)  # EvE leaves the train/eval mode to the caller
    after_step = torch.get_rng_state()
    # the global random state is where one call of the closure leaves it...
    torch.set_rng_state(start)
    closure()
    assert torch.equal(torch.get_rng_state(), after_step)
    # ...so the next step draws another mask, again common to all its evaluations
    torch.set_rng_state(after_step)
    masks.clear()
    opt.step(closure)
    assert all(torch.equal(m, masks[0]) for m in masks)
    assert not torch.equal(masks[0], first_step[0])


def test_eval_mode_forwards_are_deterministic_and_training_still_works():
    model = net(dropout=0.5)
    model.eval()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    start = val_loss(model)
    train(model, opt, 60, batch_seed=0)
    assert not model.training
    assert val_loss(model) < 0.8 * start


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_in_the_users_loop(set_to_none):
    model = net()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    reference_model = net()
    reference = EvE(reference_model.parameters(), lr=1e-2, seed=0)
    for k in range(10):
        opt.zero_grad(set_to_none=set_to_none)
        train(model, opt, 1, batch_seed=k)
        train(reference_model, reference, 1, batch_seed=k)
    assert torch.equal(flat(model), flat(reference_model))
    assert all(p.grad is None for p in model.parameters())  # EvE leaves no gradient behind


def test_frozen_parameters_are_left_untouched():
    model = net()
    model[0].weight.requires_grad_(False)
    frozen = model[0].weight.detach().clone()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    assert opt.population.z.shape[1] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    start = val_loss(model)
    train(model, opt, 40, batch_seed=0)
    assert torch.equal(model[0].weight, frozen)
    assert val_loss(model) < start
    # bounds may list every parameter or only the trainable ones
    EvE(model.parameters(), bounds=[(-1.0, 1.0)] * 4)
    EvE(model.parameters(), bounds=[(-1.0, 1.0)] * 3)
    with pytest.raises(ValueError, match=r"one \(lower, upper\) pair per parameter: 4 here, or 3 trainable"):
        EvE(model.parameters(), bounds=[(-1.0, 1.0)] * 2)


def test_freezing_or_unfreezing_after_construction_is_refused():
    model = net()
    opt = EvE(model.parameters())
    model[3].bias.requires_grad_(False)
    with pytest.raises(ValueError, match=r"parameter 3 was frozen \(requires_grad=False\) after EvE was built"):
        opt.step(lambda: loss(model, *TRAIN))
    model = net()
    model[0].weight.requires_grad_(False)
    opt = EvE(model.parameters())
    model[0].weight.requires_grad_(True)
    with pytest.raises(ValueError, match=r"frozen \(requires_grad=False\) when EvE was built now requires grad"):
        opt.step(lambda: loss(model, *TRAIN))


def test_no_trainable_parameter_is_refused():
    model = net().requires_grad_(False)
    with pytest.raises(ValueError, match=r"Invalid params: none of the 4 parameters requires grad"):
        EvE(model.parameters())


@pytest.mark.parametrize(
    ("param", "message"),
    [
        (torch.eye(3).to_sparse(), r"Invalid params: parameter 0 has layout torch.sparse_coo"),
        (torch.randn(3, dtype=torch.complex64), r"Invalid params: parameter 0 is torch.complex64 .*complex"),
    ],
)
def test_sparse_and_complex_parameters_are_refused(param, message):
    with pytest.raises(ValueError, match=message):
        EvE([torch.nn.Parameter(param)])


def test_a_parameter_of_another_dtype_or_device_is_named():
    a = torch.nn.Parameter(torch.zeros(3))
    b = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"parameter 1 is torch.float64 on cpu beside torch.float32 on cpu"):
        EvE([a, b])


def test_sparse_embedding_gradients_reach_the_fallback():
    embedding = torch.nn.Embedding(10, 4, sparse=True)
    head = torch.nn.Linear(4, 2)
    opt = EvE([*embedding.parameters(), *head.parameters()], lr=1e-2, seed=0, bounds=4.0)
    index = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(0))
    target = index % 2
    before = torch.nn.functional.cross_entropy(head(embedding(index)), target).item()
    for _ in range(40):
        opt.step(lambda: torch.nn.functional.cross_entropy(head(embedding(index)), target))
    rows = embedding.weight.numel()
    assert opt.population.exp_avg[:, :rows].abs().sum() > 0  # the embedding's gradients arrived
    assert torch.nn.functional.cross_entropy(head(embedding(index)), target).item() < before


def test_casting_or_reshaping_the_model_after_construction_is_refused():
    model = net()
    opt = EvE(model.parameters())
    model.double()
    with pytest.raises(ValueError, match=r"parameter 0 is now torch.float64 on cpu, but EvE was built for "
                                         r"torch.float32 on cpu; move or cast the model"):
        opt.step(lambda: loss(model, TRAIN[0].double(), TRAIN[1]))
    model = net()
    opt = EvE(model.parameters())
    model[3].bias.data = torch.zeros(5)
    with pytest.raises(ValueError, match=r"parameter 3 changed shape from \(2,\) to \(5,\)"):
        opt.step(lambda: loss(model, *TRAIN))
