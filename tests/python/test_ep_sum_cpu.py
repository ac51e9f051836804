# SPDX-License-Identifier: Apache-2.0
"""examples/ep_dispatch.py's weighted sum on the CPU: stored into a given
output (p2pt's combine, whole or chunk by chunk) it is byte for byte the
sum it returns (the `nccl` way's), for both ways of summing. The example's
check against NCCL on GPUs rests on that. And which sum and how many
combine parts its arguments give by default, and the clear error for
parts out of range."""
import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("how", ["bmm", "compiled"])
def test_the_sum_stored_into_an_output_is_the_sum_returned(ep, how):
    T, G, H = 48, 4, 80
    g = torch.Generator().manual_seed(7)
    rows = torch.randn(T, G, H, generator=g).to(torch.bfloat16)
    back = rows.view(torch.uint8).view(T, G, H * 2)
    w = torch.rand(T, G, generator=g)
    w[w < 0.3] = 0  # slots not sent: weight 0, their bytes whatever was there
    back[w == 0] = 0xFF  # bf16 NaNs, which the mask must drop
    want = ep.weighted_sum(back, w, T, H, how)
    assert not torch.isnan(want.float()).any()
    out = torch.full((T, H), 3.0, dtype=torch.bfloat16)
    assert ep.weighted_sum(back, w, T, H, how, out=out) is out
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    chunked = torch.full((T, H), 3.0, dtype=torch.bfloat16)
    for lo, hi in ((0, 17), (17, 40), (40, T)):  # as a chunked combine's `then` calls it
        ep.weighted_sum(back[lo:hi], w[lo:hi], hi - lo, H, how, out=chunked[lo:hi])
    assert torch.equal(chunked.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("triton, argv, want", [
    (True, [], ("capped", 8)),
    (True, ["--tokens", "128"], ("capped", 1)),  # a part of 16 tokens costs more than it hides
    (True, ["--tokens", "1024"], ("capped", 2)),
    (True, ["--tokens", "100000"], ("capped", 8)),
    (True, ["--sum", "compiled"], ("compiled", 1)),
    (True, ["--chunks", "3"], ("capped", 3)),
    (False, [], ("compiled", 1)),  # no Triton: the compiled sum, one part
])
def test_the_default_sum_and_parts(ep, monkeypatch, triton, argv, want):
    monkeypatch.setattr(ep, "triton", object() if triton else None)
    monkeypatch.setattr("sys.argv", ["ep_dispatch.py", *argv])
    a = ep.parse()
    assert (a.sum, a.chunks) == want


@pytest.mark.parametrize("chunks", ["0", "-2", "17"])
def test_parts_out_of_range_are_a_clear_error(ep, monkeypatch, capsys, chunks):
    monkeypatch.setattr("sys.argv", ["ep_dispatch.py", "--chunks", chunks])
    with pytest.raises(SystemExit) as e:
        ep.parse()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--chunks {chunks}: expected 1 to 16" in err, err


def test_more_parts_than_pieces_to_the_peers_are_a_clear_error(ep, monkeypatch):
    monkeypatch.setattr("sys.argv", ["ep_dispatch.py", "--tokens", "4", "--chunks", "9"])
    a = ep.parse()
    with pytest.raises(SystemExit, match=r"--chunks 9: at most 8, the pieces to the peers "
                                         r"\(4 tokens x 2 peers\)"):
        ep.P2pt(a, 3, 0, "cpu")

