"""Kernels for the requests of a program badc never saw, rebuilt from what the probe recorded (live).

A trace of an ordinary program has no campaign config: each request record carries `setup`, the
generate() keywords and the model's generation config as portable bytes (badc_trace/portable.py),
with the model and tokenizers by path. Here they are loaded again, the model once per path, and each
distinct (setup, prompt) gets its sequential kernel, which builds fresh processors and stopping
criteria exactly as generate() prepared them in the program.
"""

from __future__ import annotations

from typing import Any

from badc_replay.engines.transformers.harness import load_pretrained
from badc_replay.engines.transformers.kernel import Kernel
from badc_trace import portable
from badc_trace.engines.transformers import TransformersInstrumentor

PORTABLE = TransformersInstrumentor.portable_allowlist  # what replay loads from a trace's recorded arguments

# Keywords that only choose the drafter: the sequential kernel runs without them (and so never
# loads an assistant model), the processors and stop rules it builds do not depend on them.
SPECULATIVE = frozenset({"assistant_model", "assistant_tokenizer", "prompt_lookup_num_tokens",
                         "max_matching_ngram_size", "assistant_early_exit", "num_assistant_tokens"})


class ProgramKernels:
    """`for_request(request)` -> the request's kernel; raises portable.NotPortable saying why not."""

    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}
        self._models: dict[tuple[Any, ...], Any] = {}
        self._tokenizers: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        self._kernels: dict[tuple[str, tuple[int, ...]], Kernel] = {}

    def for_request(self, request: dict[str, Any]) -> Kernel:
        setup = request.get("setup")
        if setup is None:
            raise portable.NotPortable("the request records no generate() arguments (traced at level counts, or "
                                       "by an older badc)")
        if "unportable" in setup:
            raise portable.NotPortable(f"the program's generate() arguments could not be recorded: "
                                       f"{setup['unportable']}")
        key = setup["key"]
        if "blob" in setup:
            self._blobs[key] = setup["blob"]
        blob = self._blobs.get(key)
        if blob is None:
            raise portable.NotPortable(f"the arguments {key} were written with an earlier request this trace "
                                       "does not hold")
        slot = (key, tuple(request["prompt"]))
        if slot not in self._kernels:
            model = self._model(portable.loads(blob, PORTABLE)["model"], "target")

            def call_kwargs() -> dict[str, Any]:  # fresh objects for every call: processors keep state
                args = portable.loads(blob, PORTABLE)["kwargs"]
                return {k: self._resolve(v) for k, v in args.items() if k not in SPECULATIVE}

            def speculation() -> dict[str, Any]:  # the drafter's keywords, an assistant model loaded once
                args = portable.loads(blob, PORTABLE)["kwargs"]
                return {k: self._resolve(v, "assistant") for k, v in args.items() if k in SPECULATIVE}

            self._kernels[slot] = Kernel.of_program(model, request["prompt"], call_kwargs, speculation)
        return self._kernels[slot]

    def _model(self, ref: portable.Ref, role: str) -> Any:
        """The model `ref` names, loaded once per role: an assistant loaded from the target's own folder is
        another object in the program (its generation config is the drafter's state), and so here."""
        import torch

        slot = (role, ref.path, ref.load, ref.dtype,
                portable.digest(portable.dumps(ref.generation_config, PORTABLE)))
        if slot not in self._models:
            try:  # the weights alone: a folder without tokenizer files (a program that passes ids) is common
                model = load_pretrained("model", ref.path, dict(ref.load))
            except (OSError, ValueError) as e:
                raise portable.NotPortable(f"the model {ref.path!r} could not be loaded here ({e})") from None
            if ref.dtype:
                model = model.to(getattr(torch, ref.dtype))
            if ref.generation_config is not None:
                model.generation_config = ref.generation_config
            self._models[slot] = model
        return self._models[slot]

    def _resolve(self, v: Any, role: str = "target") -> Any:
        if not isinstance(v, portable.Ref):
            return v
        if v.kind == "model":
            return self._model(v, role)
        slot = (v.path, v.load)
        if slot not in self._tokenizers:  # only where the program passed one (stop strings need it)
            try:
                self._tokenizers[slot] = load_pretrained("tokenizer", v.path, dict(v.load))
            except (OSError, ValueError) as e:
                raise portable.NotPortable(f"the tokenizer {v.path!r} could not be loaded here ({e})") from None
        return self._tokenizers[slot]
