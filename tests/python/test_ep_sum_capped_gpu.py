# SPDX-License-Identifier: Apache-2.0
"""examples/ep_dispatch.py's --sum capped on a GPU: its Triton kernel gives
each token the same bytes on any grid (one CTA a token, or a few walking
the tokens as a chunked combine caps them), chunk by chunk or whole, is
the fp32 formula within a bf16 rounding, drops the NaNs of slots not sent
and writes no byte outside its output. Sizes: a row shorter than a block,
7,168 values (the example's) and one of two blocks, the second ragged.
Skips without a GPU or Triton."""
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="PyTorch sees no CUDA device")

GUARD = -7.0  # the guard rows' value, never a sum here


def routed(T, G, H, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    rows = torch.randn(T, G, H, generator=g, device="cuda").to(torch.bfloat16)
    w = torch.rand(T, G, generator=g, device="cuda")
    w[w < 0.3] = 0  # slots not sent: weight 0, their bytes whatever was there
    back = rows.view(torch.uint8).view(T, G, H * 2)
    back[w == 0] = 0xFF  # bf16 NaNs, which the mask must drop
    return rows, back, w


def guarded(T, H):
    """A [T, H] output between two guard rows: (the whole, the output)."""
    whole = torch.full((T + 2, H), GUARD, dtype=torch.bfloat16, device="cuda")
    return whole, whole[1:T + 1]


@pytest.mark.parametrize("H", [80, 7168, 9000])
def test_the_capped_sum_is_the_same_on_any_grid(ep, H):
    if ep.triton is None:
        pytest.skip("this PyTorch has no Triton")
    T, G = 37, 4
    rows, back, w = routed(T, G, H, seed=H)
    ref = torch.zeros(T, H, device="cuda")
    for r in range(G):
        ref += torch.where(w[:, r, None] > 0, rows[:, r].float() * w[:, r, None], 0.0)
    whole, one = guarded(T, H)
    assert ep.weighted_sum(back, w, T, H, "capped", out=one) is one  # one CTA a token
    assert not torch.isnan(one.float()).any()
    torch.testing.assert_close(one.float(), ref.to(torch.bfloat16).float(), rtol=2 ** -7, atol=1e-6)
    assert (whole[0] == GUARD).all() and (whole[-1] == GUARD).all()
    for ctas in (1, 5, 66):
        whole2, out = guarded(T, H)
        ep.weighted_sum(back, w, T, H, "capped", out=out, ctas=ctas)
        assert torch.equal(out.view(torch.int16), one.view(torch.int16)), ctas
        assert (whole2[0] == GUARD).all() and (whole2[-1] == GUARD).all()
    whole3, chunked = guarded(T, H)
    for lo, hi, ctas in ((0, 17, 5), (17, 30, 3), (30, T, None)):  # as the chunks' `then`
        ep.weighted_sum(back[lo:hi], w[lo:hi], hi - lo, H, "capped", out=chunked[lo:hi],
                        ctas=ctas)
    assert torch.equal(chunked.view(torch.int16), one.view(torch.int16))
    assert (whole3[0] == GUARD).all() and (whole3[-1] == GUARD).all()
