import torch

from eve_search.engine.batches import BatchStream


def stream(seed=0, rows=10, batch=4):
    return BatchStream(torch.arange(float(rows))[:, None], torch.arange(rows), batch,
                       generator=torch.Generator().manual_seed(seed))


def test_each_epoch_is_a_permutation_cut_into_full_batches():
    s = stream()
    epoch = [s.next() for _ in range(2)]  # 10 rows, batch 4: two full batches, the last 2 rows dropped
    rows = torch.cat([y for _, y in epoch])
    assert len(rows) == 8 and len(set(rows.tolist())) == 8
    assert all(torch.equal(x[:, 0].long(), y) for x, y in epoch)  # inputs and targets stay paired
    next_epoch = torch.cat([s.next()[1] for _ in range(2)])
    assert not torch.equal(rows, next_epoch)


def test_a_loaded_stream_yields_exactly_the_batches_the_saved_one_would():
    a = stream(seed=3)
    for _ in range(3):
        a.next()
    state = a.state_dict()
    b = stream(seed=99)
    b.load_state_dict(state)
    for _ in range(7):
        assert torch.equal(a.next()[1], b.next()[1])


def test_bad_arguments_are_named():
    import pytest

    with pytest.raises(ValueError, match="Invalid batch_size: 11"):
        stream(batch=11)
    with pytest.raises(ValueError, match="x has 3 rows but y has 2"):
        BatchStream(torch.zeros(3, 1), torch.zeros(2), 1, generator=torch.Generator())


def test_batches_are_the_rows_of_a_shuffled_copy_without_holding_one():
    x, y = torch.randn(50, 3, generator=torch.Generator().manual_seed(1)), torch.arange(50)
    s = BatchStream(x, y, 8, generator=torch.Generator().manual_seed(5))
    order = torch.randperm(50, generator=torch.Generator().manual_seed(5))
    shuffled_x, shuffled_y = x[order], y[order]  # what a stream holding its own copy would slice
    for k in range(6):
        bx, by = s.next()
        assert torch.equal(bx, shuffled_x[8 * k:8 * k + 8]) and torch.equal(by, shuffled_y[8 * k:8 * k + 8])
    copies = [k for k, t in vars(s).items() if isinstance(t, torch.Tensor) and t is not x and t.dtype == x.dtype]
    assert copies == []  # only the shared inputs, no shuffled copy
