# SPDX-License-Identifier: Apache-2.0
"""p2pt.distributed's argument checks, on the CPU: each bad argument of
semaphores, signal, wait, share and AlltoallV's constructor gets a
ValueError that names what was expected and what came, before any GPU
work or collective."""
import pytest

torch = pytest.importorskip("torch")
try:
    import p2pt.distributed as pd
    from p2pt.distributed import _alltoallv as av
except ImportError as e:  # p2pt.distributed needs torch.distributed
    pytest.skip(f"p2pt.distributed: {e}", allow_module_level=True)


@pytest.mark.parametrize("n", [0, -1, 2.0, True, "4"])
def test_semaphores_wants_a_count_of_at_least_one(n):
    with pytest.raises(ValueError, match=f"n must be an int of at least 1, not {n!r}"):
        pd.semaphores(n)


@pytest.mark.parametrize("count", [0, -1, 1 << 32, 1.0, False])
def test_wait_wants_a_count_that_fits_32_bits(count):
    with pytest.raises(ValueError, match=r"count must be an int of 1 to 2\^32 - 1"):
        pd.wait(torch.zeros(4, dtype=torch.int64), count)


@pytest.mark.parametrize("sem, says", [
    (torch.zeros(4, dtype=torch.int64), "on cpu"),
    (torch.zeros(4, dtype=torch.int32), "torch.int32"),
    (torch.zeros(2, 4, dtype=torch.int64), "(2, 4)"),
    (0x1000, "not int"),
])
def test_signal_and_wait_want_one_semaphore_of_gpu_memory(sem, says):
    for call in (lambda: pd.signal(sem), lambda: pd.wait(sem, 1)):
        with pytest.raises(ValueError, match="a semaphore is one row of semaphores") as e:
            call()
        assert says in str(e.value)


@pytest.mark.parametrize("t, says", [
    (torch.zeros(8), "on cpu"),
    (torch.zeros(4, 4).t(), "not contiguous"),
    ([0.0] * 8, "not list"),
])
def test_share_wants_a_contiguous_gpu_tensor(t, says):
    with pytest.raises(ValueError, match="share: expected a contiguous CUDA tensor") as e:
        pd.share(t)
    assert says in str(e.value)


@pytest.mark.parametrize("max_rows, row_bytes, says", [
    (0, 16, "max_rows must be an int of at least 1, not 0"),
    (16, 0, "row_bytes must be an int of at least 1, not 0"),
    (16.0, 16, "max_rows must be an int of at least 1, not 16.0"),
    (16, -3, "row_bytes must be an int of at least 1, not -3"),
])
def test_alltoallv_wants_positive_sizes(max_rows, row_bytes, says):
    with pytest.raises(ValueError, match=says):
        pd.AlltoallV(max_rows, row_bytes)


def test_alltoallv_refuses_a_group_its_batches_cannot_signal(monkeypatch):
    monkeypatch.setattr(av.dist, "get_world_size", lambda group=None: av.BATCH_SIGNALS_MAX + 2)
    with pytest.raises(ValueError, match=f"a group of {av.BATCH_SIGNALS_MAX + 2} ranks; a batch "
                                         f"signals at most {av.BATCH_SIGNALS_MAX} peers"):
        pd.AlltoallV(16, 16)
