"""enable() from several threads at once (issue 10, "Several GPUs, streams, threads"): activation is
reference-counted under one lock, so threads may enter and leave in any interleaving; the SDPA names
are patched while any thread is inside and restored, exactly, when the last one leaves."""
from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

import flashsdpa


def test_enable_from_many_threads() -> None:
    original = F.scaled_dot_product_attention
    q = torch.randn(1, 2, 8, 16)
    expected = original(q, q, q, is_causal=True)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(seed: int) -> None:
        try:
            start.wait()
            for i in range(50):
                with flashsdpa.enable():
                    assert flashsdpa.is_active()
                    if (seed + i) % 3 == 0:
                        with flashsdpa.enable():  # nested in the same thread
                            out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
                    else:
                        out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
                    torch.testing.assert_close(out, expected)
        except BaseException as error:  # noqa: BLE001 - reported below with the thread's failure
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung in enable()"
    assert not errors, errors[0]
    assert not flashsdpa.is_active()
    assert F.scaled_dot_product_attention is original


def test_install_and_enable_across_threads() -> None:
    original = F.scaled_dot_product_attention
    flashsdpa.install()
    try:
        done = threading.Event()

        def leave_and_enter() -> None:
            with flashsdpa.enable():
                assert flashsdpa.is_active()
            done.set()

        t = threading.Thread(target=leave_and_enter)
        t.start()
        t.join(timeout=60)
        assert done.is_set()
        assert flashsdpa.is_active()  # install() still holds it
    finally:
        flashsdpa.uninstall()
    assert not flashsdpa.is_active()
    assert F.scaled_dot_product_attention is original
