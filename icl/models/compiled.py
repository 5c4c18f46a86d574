"""A compiled training step that falls back to eager where torch cannot compile it. The functions
compiled for a step (a kind's forward and loss, the optimizer's update, the fresh prompts' draw)
are pure: tensors in, new tensors out. So a call that raises left nothing half-done, and the same
call can be made again eagerly, whenever the failure comes: at the first step, or at a later one
that meets a new shape (a shorter last minibatch, a curriculum stage)."""
from __future__ import annotations


def guarded(call, failed):
    """call(); where it runs compiled code with a fallback (`failed`, set by compile and cleared by
    uncompile) and raises, `failed(error)` (which puts every compiled function of the step back to
    eager and says why) and call() again, now eager. Without a `failed` the error stands."""
    if failed is None:
        return call()
    try:
        return call()
    except Exception as e:
        failed(e)
        return call()
