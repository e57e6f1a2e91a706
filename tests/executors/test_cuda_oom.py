"""Recognising a CUDA out-of-memory in a job's output."""

from __future__ import annotations

import pytest

from jpushare.executors.cuda_oom import find_cuda_oom

OOM_OUTPUTS = {
    "PyTorch 2.5+": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
    "PyTorch 1.13-2.4": "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
    "older PyTorch": "RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB",
    "the CUDA runtime": "RuntimeError: CUDA error: out of memory",
    "TensorFlow": "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.0GiB",
}


@pytest.mark.parametrize("line", OOM_OUTPUTS.values(), ids=OOM_OUTPUTS.keys())
def test_out_of_memory_lines_are_found(line: str) -> None:
    output = f"epoch 1\nTraceback (most recent call last):\n  File 'x.py'\n{line}\n"
    assert find_cuda_oom(output) == line


def test_other_failures_are_not_oom() -> None:
    assert find_cuda_oom("RuntimeError: CUDA error: device-side assert triggered\n") is None
    assert find_cuda_oom("MemoryError\nKilled\n") is None
    assert find_cuda_oom("") is None


def test_the_last_oom_line_is_the_reason() -> None:
    assert find_cuda_oom("CUDA out of memory (1)\nok\n  CUDA out of memory (2)  \n") == (
        "CUDA out of memory (2)"
    )
