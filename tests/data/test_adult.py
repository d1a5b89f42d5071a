import gzip
import shutil

import pytest
import torch

from eve_search.data import AdultDataError, bundled_adult_dir, load_adult
from eve_search.data._adult import CATEGORICAL, NUMERIC


@pytest.fixture(scope="module")
def adult():
    return load_adult()


def test_split_sizes_and_the_107_features(adult):
    assert adult.x_train.shape == (29305, 107)
    assert adult.x_val.shape == (3256, 107)
    assert adult.x_test.shape == (16281, 107)
    assert adult.n_features == 107 == len(set(adult.feature_names))
    assert adult.x_train.dtype == torch.float32 and adult.y_train.dtype == torch.int64


def test_label_counts_match_the_official_files(adult):
    assert int(adult.y_train.sum() + adult.y_val.sum()) == 7841
    assert int(adult.y_test.sum()) == 3846


def test_numeric_columns_are_standardized_with_training_statistics_only(adult):
    numeric = adult.x_train[:, : len(NUMERIC)].double()
    torch.testing.assert_close(numeric.mean(dim=0), torch.zeros(5, dtype=torch.float64), rtol=0, atol=1e-4)
    torch.testing.assert_close(numeric.std(dim=0, unbiased=False), torch.ones(5, dtype=torch.float64),
                               rtol=0, atol=1e-4)
    val_mean = adult.x_val[:, : len(NUMERIC)].double().mean(dim=0)
    assert not torch.allclose(val_mean, torch.zeros(5, dtype=torch.float64), atol=1e-4)


def test_each_categorical_block_is_one_hot(adult):
    names = adult.feature_names
    for column in CATEGORICAL:
        block = [i for i, name in enumerate(names) if name.startswith(f"{column}=")]
        for x in (adult.x_train, adult.x_val):
            assert torch.equal(x[:, block].sum(dim=1), torch.ones(x.shape[0]))
    assert {"workclass=?", "occupation=?", "native-country=?"} <= set(names)


def test_the_validation_split_is_fixed_and_disjoint(adult, tmp_path):
    again = load_adult(tmp_path_copy(tmp_path))  # another directory: parsed afresh, not from the cache
    assert torch.equal(again.x_val, adult.x_val) and torch.equal(again.y_train, adult.y_train)
    train_rows = {tuple(r) for r in adult.x_train[:2000].tolist()}
    assert len(train_rows) > 1900


def tmp_path_copy(tmp_path, decompress=True):
    target = tmp_path / "adult"
    target.mkdir()
    for name in ("adult.data", "adult.test"):
        source = bundled_adult_dir() / f"{name}.gz"
        if decompress:
            (target / name).write_bytes(gzip.decompress(source.read_bytes()))
        else:
            shutil.copy(source, target / f"{name}.gz")
    return target


def test_an_uncompressed_copy_loads_identically(adult, tmp_path):
    copy = load_adult(tmp_path_copy(tmp_path))
    assert torch.equal(copy.x_test, adult.x_test) and copy.feature_names == adult.feature_names


def test_a_missing_directory_is_a_one_line_error(tmp_path):
    with pytest.raises(AdultDataError, match="is not a directory") as error:
        load_adult(tmp_path / "nope")
    assert "\n" not in str(error.value)


def test_a_directory_without_the_files_is_a_one_line_error(tmp_path):
    with pytest.raises(AdultDataError, match="neither adult.data.gz nor adult.data found"):
        load_adult(tmp_path)


def test_a_corrupt_file_names_the_file_and_the_expected_checksum(tmp_path):
    directory = tmp_path_copy(tmp_path)
    data = bytearray((directory / "adult.data").read_bytes())
    data[1000] ^= 0x01
    (directory / "adult.data").write_bytes(bytes(data))
    with pytest.raises(AdultDataError, match=r"adult.data: sha256 .* \(expected 5b00264637db\.\.\.\)") as error:
        load_adult(directory)
    assert "\n" not in str(error.value)


def test_an_invalid_gzip_file_is_reported(tmp_path):
    directory = tmp_path_copy(tmp_path, decompress=False)
    (directory / "adult.test.gz").write_bytes(b"not gzip at all")
    with pytest.raises(AdultDataError, match="adult.test.gz: is not a valid gzip file"):
        load_adult(directory)
