"""Runtime intervention for the repaired arm: the change of cpu_triton_utils.py.diff, made at run time.

`apply(llm)` replaces the implementation behind the CPU override of the rejection sampler's
`expand_kernel` with one that writes its result into `output` for every dtype (see README.md).
Call it after the `LLM` exists: the overrides are registered while the engine starts. Returns a
function that undoes the patch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

REPAIR_ID = "vllm/cpu-expand"


def expand_kernel_impl(output: Any, input_val: Any, cu_num_tokens: Any, replace_from: Any, replace_to: Any,
                       MAX_NUM_TOKENS: Any = None) -> None:  # noqa: N803 - the kernel's parameter names
    import torch

    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    output.copy_(values.repeat_interleave(counts, output_size=output.numel()))


def apply(llm: Any = None) -> Callable[[], None]:
    from vllm.triton_utils.dispatcher import KernelOverride
    from vllm.v1.sample import rejection_sampler

    override = rejection_sampler.expand_kernel
    if not isinstance(override, KernelOverride):
        raise RuntimeError(f"{REPAIR_ID}: expand_kernel is not a CPU override here (Triton present, or no LLM "
                           "created yet); nothing to repair")
    before = override._impl, override.func
    override._impl = override.func = expand_kernel_impl

    def undo() -> None:
        override._impl, override.func = before
    return undo
