"""Probes for the toy engine (badc_toy): its vocabulary as text (`vocab`, once per process); per request,
the prompt and what was returned; every drafter
call with the committed ids and the drafts; every processor call with the ids it saw, its logical
prefix length and, for stateful processors, its state after the call; every stop check with the ids it
saw and where it ran (after each committed token, or at the end of a verification block).

The engine is badc's own, so the probes wrap its methods by name; the version is badc's.
"""

from __future__ import annotations

from typing import Any

from badc_trace.instrument import BaseInstrumentor, Counter, TraceSink
from badc_trace.outcomes import format_outcome


def _pieces() -> list[bytes]:
    """The toy vocabulary as text: tokens 0-4 are a-e, the last is EOS."""
    from badc_toy.engine import VOCAB

    return [chr(ord("a") + i).encode() for i in range(VOCAB - 1)] + [b"</s>"]


class ToyInstrumentor(BaseInstrumentor):
    engine = "toy"
    package = "badc"
    supported = ">=0.1"
    hook = "badc_toy.engine"  # badc-trace installs the probe when this module is first imported

    def _instrument(self, sink: TraceSink) -> None:
        from badc_toy.engine import ToyEngine

        self._wrap(ToyEngine, "generate", self._generate)
        self._wrap(ToyEngine, "_propose", self._propose)
        self._wrap(ToyEngine, "_call_processor", self._processor)
        self._wrap(ToyEngine, "_check_stop", self._stop)
        self._wrap(ToyEngine, "_verified", self._verified)

    def _generate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        prompt, max_new_tokens = (list(args) + [kwargs.get("prompt"), kwargs.get("max_new_tokens")])[:2]
        req = self._new_request(prompt=[int(t) for t in prompt])
        self._vocab("toy", _pieces)
        self._begin(req, {"prompt": req.prompt,
                          "params": {"max_new_tokens": max_new_tokens, "speculative": instance.speculative}})
        try:
            tokens, finish, logprobs = wrapped(*args, **kwargs)
        except Exception as e:
            self._end_crashed(req, "caller", e)
            raise
        self._end(req, format_outcome(tokens, finish),
                  {"tokens": list(tokens), "finish_reason": finish, "logprobs": list(logprobs)})
        return tokens, finish, logprobs

    def _propose(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        out = wrapped(*args, **kwargs)
        req = self._req
        self.sink.count(Counter.DRAFTER_CALLS)
        self.sink.count(Counter.PROPOSED, len(out))
        ids = args[0] if args else kwargs["ids"]
        self.sink.emit({"type": "draft", "req": None if req is None else req.id, "committed": list(ids),
                        "draft": list(out)})
        return out

    def _processor(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        out = wrapped(*args, **kwargs)
        index, proc, ids, logical_len = args[:4]
        req = self._req
        self.sink.count(Counter.PROCESSOR_CALLS)
        if self.sink.recording:
            record = {"type": "processor", "req": None if req is None else req.id, "proc": index,
                      "name": proc.name, "ids": list(ids), "logical_len": logical_len}
            if proc.stateful:
                record["state"] = proc.state()
            if self.sink.full:
                record["scores_out"] = [float(x) for x in out]
            self.sink.emit(record)
        return out

    def _stop(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        result = wrapped(*args, **kwargs)
        ids, where = args[:2]
        req = self._req
        self.sink.count(Counter.STOP_CHECKS)
        self.sink.emit({"type": "stop_check", "req": None if req is None else req.id, "ids": list(ids),
                        "where": where, "result": bool(result)})
        return result

    def _verified(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        drafts, accepted = args[:2]
        self.sink.count(Counter.ACCEPTED, accepted)
        return wrapped(*args, **kwargs)
