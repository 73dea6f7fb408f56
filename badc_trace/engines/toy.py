"""Probes for the toy engine (badc_toy): its vocabulary as text (`vocab`, once per process); per request,
the prompt and what was returned; every drafter
call with the committed ids and the drafts; every processor call with the ids it saw, its logical
prefix length and, for stateful processors, its state after the call; every stop check with the ids it
saw and where it ran (after each committed token, or at the end of a verification block).

The engine is badc's own, so the probes wrap its methods by name; the version is badc's.
"""

from __future__ import annotations

from typing import Any

from badc_trace.instrument import BaseInstrumentor, TraceSink
from badc_trace.outcomes import format_outcome


class _Request:
    def __init__(self, rid: int, prompt: list[int]):
        self.id, self.prompt, self.crash, self.outcome = rid, prompt, None, None


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

        self.last_request: _Request | None = None
        self._wrap(ToyEngine, "generate", self._generate)
        self._wrap(ToyEngine, "_propose", self._propose)
        self._wrap(ToyEngine, "_call_processor", self._processor)
        self._wrap(ToyEngine, "_check_stop", self._stop)
        self._wrap(ToyEngine, "_verified", self._verified)

    def _generate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        prompt, max_new_tokens = (list(args) + [kwargs.get("prompt"), kwargs.get("max_new_tokens")])[:2]
        req = _Request(next(self._ids), [int(t) for t in prompt])
        self._local.req = req
        self.sink.count("requests")
        self._vocab("toy", _pieces)
        self.sink.emit({"type": "request", "req": req.id, "prompt": req.prompt,
                        "params": {"max_new_tokens": max_new_tokens, "speculative": instance.speculative}})
        try:
            tokens, finish, logprobs = wrapped(*args, **kwargs)
        except Exception as e:
            self._crash(req, "caller", e)
            req.outcome = format_outcome([], f"crash:{req.crash}")
            self.sink.emit({"type": "return", "req": req.id, "tokens": [], "finish_reason": "crash",
                            "outcome": req.outcome})
            raise
        finally:
            self._local.req = None
            self.last_request = req
        req.outcome = format_outcome(tokens, finish)
        self.sink.emit({"type": "return", "req": req.id, "tokens": list(tokens), "finish_reason": finish,
                        "outcome": req.outcome, "logprobs": list(logprobs)})
        return tokens, finish, logprobs

    def _propose(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        out = wrapped(*args, **kwargs)
        req = self._req
        self.sink.count("drafter_calls")
        self.sink.count("proposed", len(out))
        ids = args[0] if args else kwargs["ids"]
        self.sink.emit({"type": "draft", "req": None if req is None else req.id, "committed": list(ids),
                        "draft": list(out)})
        return out

    def _processor(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        out = wrapped(*args, **kwargs)
        index, proc, ids, logical_len = args[:4]
        req = self._req
        self.sink.count("processor_calls")
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
        self.sink.count("stop_checks")
        self.sink.emit({"type": "stop_check", "req": None if req is None else req.id, "ids": list(ids),
                        "where": where, "result": bool(result)})
        return result

    def _verified(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        drafts, accepted = args[:2]
        self.sink.count("accepted", accepted)
        return wrapped(*args, **kwargs)
