"""badc_trace.binder: the same arguments as inspect.Signature.bind, and the same errors."""

import inspect

import pytest

from badc_trace.binder import Binder


def create_completion(self, prompt, suffix=None, max_tokens=16, *, logits_processor=None, stream=False):
    pass


def variadic(self, *args, **kwargs):
    pass


CALLS = [((0, "p"), {}), ((0,), {"prompt": "p", "stream": True}), ((0, "p", "s", 3), {"logits_processor": [1]}),
         ((0,), {"stream": True, "prompt": "p", "max_tokens": 2})]
BAD = [((0,), {}), ((0, "p"), {"prompt": "q"}), ((0, "p", 1, 2, 3), {}), ((0, "p"), {"nope": 1})]


@pytest.mark.parametrize("args, kwargs", CALLS)
def test_valid_calls_bind_as_inspect_does(args, kwargs):
    expected = dict(inspect.signature(create_completion).bind(*args, **kwargs).arguments)
    got = Binder(create_completion)(*args, **kwargs)
    assert got == expected and list(got) == list(expected)  # the same order too


@pytest.mark.parametrize("args, kwargs", BAD)
def test_invalid_calls_raise_the_same_type_error(args, kwargs):
    with pytest.raises(TypeError) as want:
        inspect.signature(create_completion).bind(*args, **kwargs)
    with pytest.raises(TypeError) as got:
        Binder(create_completion)(*args, **kwargs)
    assert str(got.value) == str(want.value)


def test_a_variadic_signature_goes_through_inspect():
    b = Binder(variadic)
    assert not b.plain and b(0, 1, x=2) == {"self": 0, "args": (1,), "kwargs": {"x": 2}}
