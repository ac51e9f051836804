# SPDX-License-Identifier: Apache-2.0
"""Window lifetime, on any machine (the C calls recorded by a stand-in
library): a window is unregistered exactly once, when its owner is
collected, when release() is called, or when the handle closes, whichever
comes first; never after the handle is finalized; a base registered
again while live is shared, not registered twice, also by threads at
once; an owner that cannot be weakly referenced registers nothing; an
empty storage gets no window."""
import gc

import pytest

import p2pt
from p2pt import _handle


class FakeLib:
    def __init__(self):
        self.calls = []

    def p2pt_window_register(self, h, device, base, nbytes):
        self.calls.append(("register", device, base, nbytes))
        return 0

    def p2pt_window_unregister(self, h, device, base):
        self.calls.append(("unregister", device, base))
        return 0

    def p2pt_finalize(self, h):
        self.calls.append(("finalize",))
        return 0


class Owner:
    """Stands for a tensor: anything weakly referenceable."""


def fake_handle(monkeypatch):
    lib = FakeLib()
    monkeypatch.setattr(_handle, "load", lambda: lib)
    h = p2pt.Handle.__new__(p2pt.Handle)
    h._lib, h._live, h._windows, h._prepared = lib, _handle._Live(), {}, set()
    h._h = _handle.ctypes.c_void_p(0x1000)
    h._live.ptr = 0x1000
    return h, lib


def test_a_window_goes_when_its_owner_goes(monkeypatch):
    h, lib = fake_handle(monkeypatch)
    owner = Owner()
    w = h.window(0, 0x2000, 256, owner)
    assert w.registered and lib.calls == [("register", 0, 0x2000, 256)]
    del owner
    gc.collect()
    assert not w.registered
    assert lib.calls[-1] == ("unregister", 0, 0x2000)
    w.release()  # a second release does nothing
    assert lib.calls.count(("unregister", 0, 0x2000)) == 1


def test_windows_go_before_the_handle_and_never_after(monkeypatch):
    h, lib = fake_handle(monkeypatch)
    owner = Owner()
    w = h.window(1, 0x3000, 64, owner)
    h.close()
    assert lib.calls[-2:] == [("unregister", 1, 0x3000), ("finalize",)]
    assert not w.registered
    del owner
    gc.collect()
    assert lib.calls[-1] == ("finalize",), "nothing reaches a finalized handle"


def test_a_live_base_is_shared_and_a_larger_one_replaces_it(monkeypatch):
    h, lib = fake_handle(monkeypatch)
    a, b = Owner(), Owner()
    w1 = h.window(0, 0x4000, 128, a)
    assert h.window(0, 0x4000, 64, b) is w1
    w2 = h.window(0, 0x4000, 512, b)
    assert w2 is not w1 and not w1.registered and w2.registered
    assert lib.calls == [("register", 0, 0x4000, 128), ("unregister", 0, 0x4000),
                         ("register", 0, 0x4000, 512)]
    del a
    gc.collect()
    assert w2.registered, "the first owner's death does not release its successor"
    w2.release()
    assert lib.calls[-1] == ("unregister", 0, 0x4000)


def test_threads_registering_one_base_share_one_window(monkeypatch):
    import threading
    h, lib = fake_handle(monkeypatch)
    slow = threading.Event()
    register = lib.p2pt_window_register

    def once(hp, device, base, nbytes):
        # As p2pt does: a base already registered is status 5.
        if ("register", device, base, nbytes) in lib.calls:
            return 5
        slow.wait(0.05)  # the window another thread would slip into
        return register(hp, device, base, nbytes)

    monkeypatch.setattr(lib, "p2pt_window_register", once)
    owner, got, errors = Owner(), [], []

    def take():
        try:
            got.append(h.window(0, 0x5000, 256, owner))
        except Exception as e:  # noqa: BLE001 (what a thread met is the test's result)
            errors.append(e)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(got) == 8 and all(w is got[0] for w in got)
    assert lib.calls == [("register", 0, 0x5000, 256)]


def test_an_owner_that_cannot_be_weakly_referenced_registers_nothing(monkeypatch):
    h, lib = fake_handle(monkeypatch)
    with pytest.raises(TypeError, match="weak reference"):
        h.window(0, 0x6000, 64, 12345)
    assert lib.calls == [] and h._windows == {}
    owner = Owner()
    w = h.window(0, 0x6000, 64, owner)  # and the base is free for a proper owner
    assert w.registered and lib.calls == [("register", 0, 0x6000, 64)]


def test_an_empty_storage_gets_no_window(monkeypatch):
    torch = pytest.importorskip("torch")
    from p2pt.torch import _handles
    h, lib = fake_handle(monkeypatch)
    assert _handles._windows(h, 0, [torch.empty(0).untyped_storage()]) == (None,)
    assert lib.calls == [], "p2pt refuses a window of 0 bytes: nothing is asked of it"
    with pytest.raises(ValueError, match="storage is empty"):
        _handles.register_window(torch.empty(0))


def test_an_owner_that_moves_gives_up_its_old_window_and_others_keep_theirs(monkeypatch):
    """A storage that resize_ reallocated asks for a window at its new base:
    with moves=True its window at the old base goes first (the memory there
    is no longer its); a window made without moves, or another owner's,
    stays."""
    h, lib = fake_handle(monkeypatch)
    storage, other = Owner(), Owner()
    old = h.window(0, 0x2000, 256, storage, moves=True)
    kept = h.window(0, 0x9000, 64, other, moves=True)
    fixed = h.window(0, 0x4000, 64, storage)  # a range of its own, not moving
    new = h.window(0, 0x8000, 512, storage, moves=True)
    assert not old.registered and new.registered and kept.registered and fixed.registered
    assert lib.calls == [("register", 0, 0x2000, 256), ("register", 0, 0x9000, 64),
                         ("register", 0, 0x4000, 64), ("unregister", 0, 0x2000),
                         ("register", 0, 0x8000, 512)]
    # On another device the same owner's window is another window.
    h.window(1, 0x2000, 256, storage, moves=True)
    assert new.registered and lib.calls[-1] == ("register", 1, 0x2000, 256)


def test_a_base_another_moving_owner_left_is_registered_for_the_owner_there_now(monkeypatch):
    """Storage B moved away from a base (not yet used again, so its window
    there stands) that storage C holds now: C's window is its own,
    registered afresh, so that B, used again at its new base, leaves C's
    in place."""
    h, lib = fake_handle(monkeypatch)
    b, c = Owner(), Owner()
    left = h.window(0, 0x2000, 256, b, moves=True)
    mine = h.window(0, 0x2000, 128, c, moves=True)
    assert mine is not left and mine.registered and not left.registered
    assert lib.calls[-2:] == [("unregister", 0, 0x2000), ("register", 0, 0x2000, 128)]
    h.window(0, 0x8000, 256, b, moves=True)  # b at its new base
    assert mine.registered and lib.calls[-1] == ("register", 0, 0x8000, 256)
    # Windows made without moves are shared by base, as before.
    d, e = Owner(), Owner()
    assert h.window(0, 0x4000, 64, d) is h.window(0, 0x4000, 64, e)
