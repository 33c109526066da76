"""Non-tensor arguments in records: keyword arguments that torch's Python functions forward with their default
values are not recorded, everything the caller changed is (with the default beside it), and a call rebuilt from the
record with the callable's own defaults gives the captured output."""

import json
import math

import numpy as np
import torch
import torch.nn.functional as F
from test_capture_support import Dump, make_session

from engines.adapters.torch.api_defaults import defaults_of, same_as_default, split_kwargs


def _capture(tmp_path, body):
    s = make_session(tmp_path, task="tensor", level="L1")
    s.start()
    body()
    s.stop()
    s.step_end()
    s.close()
    return Dump(tmp_path / "rank0")


def _args(dump, name):
    return json.loads(dump.record(name)["args"])


def _calls():
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    w = torch.randn(10, 8)
    ids = torch.tensor([[1, 0, 3], [2, 9, 0]])
    target = torch.tensor([1, 2, 3, 0])
    return [
        ("Functional.embedding.0.forward", lambda: F.embedding(ids, w)),
        ("Functional.embedding.1.forward", lambda: F.embedding(ids, w, padding_idx=0, max_norm=None)),
        ("Functional.layer_norm.0.forward", lambda: F.layer_norm(x, (8,))),
        ("Functional.layer_norm.1.forward", lambda: F.layer_norm(x, (8,), eps=1e-1)),
        ("Functional.cross_entropy.0.forward", lambda: F.cross_entropy(x, target)),
        ("Functional.cross_entropy.1.forward",
         lambda: F.cross_entropy(x, target, ignore_index=-100, reduction="sum", label_smoothing=0.1)),
        ("Functional.dropout.0.forward", lambda: F.dropout(x, training=False)),
        ("Functional.dropout.1.forward", lambda: F.dropout(x, 0.0, True)),
        ("Functional.max_pool1d.0.forward", lambda: F.max_pool1d(x[None], 2)),
        ("Functional.max_pool1d.1.forward", lambda: F.max_pool1d(x[None], 2, ceil_mode=True)),
    ]


EXPECTED = {
    "Functional.embedding.0.forward": ({}, None),
    "Functional.embedding.1.forward": ({"padding_idx": 0}, {"padding_idx": None}),
    "Functional.layer_norm.0.forward": ({}, None),
    "Functional.layer_norm.1.forward": ({"eps": 0.1}, {"eps": 1e-05}),
    "Functional.cross_entropy.0.forward": ({}, None),
    "Functional.cross_entropy.1.forward": ({"reduction": "sum", "label_smoothing": 0.1},
                                           {"reduction": "mean", "label_smoothing": 0.0}),
    # F.dropout(x, 0.0, True): torch forwards p and training by keyword; p differs, training is the default
    "Functional.dropout.0.forward": ({"training": False}, {"training": True}),
    "Functional.dropout.1.forward": ({"p": 0.0}, {"p": 0.5}),
    # boolean_dispatch wrappers: the defaults come from the function they dispatch to
    "Functional.max_pool1d.0.forward": ({}, None),
    "Functional.max_pool1d.1.forward": ({"ceil_mode": True}, {"ceil_mode": False}),
}


def test_default_keyword_arguments_are_not_recorded(tmp_path):
    calls = _calls()
    dump = _capture(tmp_path, lambda: [fn() for _, fn in calls])
    for name, (kwargs, defaults) in EXPECTED.items():
        args = _args(dump, name)
        assert args["kwargs"] == kwargs, name
        assert args.get("defaults") == defaults, name
    # positional arguments are what the caller passed, defaults or not
    assert _args(dump, "Functional.layer_norm.0.forward")["args"] == [{"tensor": "input.0"}, [8]]
    assert _args(dump, "Functional.max_pool1d.0.forward")["args"] == [{"tensor": "input.0"}, 2]
    # C functions receive only what the caller wrote: an explicit default stays
    dump2 = _capture(tmp_path / "c", lambda: torch.add(torch.ones(2), torch.ones(2), alpha=1))
    assert _args(dump2, "Torch.add.0.forward")["kwargs"] == {"alpha": 1}
    # no scalar row for a dropped default reaches compare
    rows = dump.rows("Functional.cross_entropy.0.forward")
    assert set(rows) == {"input.0", "input.1", "output.0"}


def _rebuild(value, tensors):
    if isinstance(value, dict) and set(value) == {"tensor"}:
        return tensors[value["tensor"]]
    if isinstance(value, list):
        return [_rebuild(v, tensors) for v in value]
    if isinstance(value, dict) and "type" not in value:
        return {k: _rebuild(v, tensors) for k, v in value.items()}
    return value


def test_a_call_rebuilt_from_its_record_gives_the_captured_output(tmp_path):
    """What replay (API pre-check, analyze-overflow) does: arguments from the record, defaults from the callable."""
    calls = _calls()
    outputs = {}
    dump = _capture(tmp_path, lambda: outputs.update({name: fn() for name, fn in calls}))
    funcs = {"embedding": F.embedding, "layer_norm": F.layer_norm, "cross_entropy": F.cross_entropy,
             "dropout": F.dropout, "max_pool1d": F.max_pool1d}
    for name in EXPECTED:
        rows = dump.rows(name)
        tensors = {slot: torch.from_numpy(np.array(dump.reader.tensor_data(int(row["row"])))) for slot, row in
                   rows.items() if slot.startswith("input.")}
        args = _args(dump, name)
        call_args = _rebuild(args["args"], tensors)
        call_kwargs = _rebuild(args["kwargs"], tensors)
        if name.startswith("Functional.layer_norm"):
            call_args[1] = tuple(call_args[1])
        out = funcs[name.split(".")[1]](*call_args, **call_kwargs)
        torch.testing.assert_close(out, outputs[name], rtol=0, atol=0, msg=name)


def test_equal_to_the_default_means_the_same_plain_value():
    nan = float("nan")
    assert same_as_default(None, None) and same_as_default(2.0, 2.0) and same_as_default(nan, float("nan"))
    assert same_as_default("mean", "mean") and same_as_default(torch.float32, torch.float32)
    assert same_as_default((1, 1), (1, 1)) and same_as_default([0, 2.0], [0, 2.0])
    assert not same_as_default(True, 1) and not same_as_default(1, True) and not same_as_default(2, 2.0)
    assert not same_as_default(torch.float16, torch.float32) and not same_as_default((1, 2), (1, 1))
    assert not same_as_default(torch.zeros(()), None) and not same_as_default(torch.zeros(()), 0.0)
    t = torch.zeros(2)
    assert same_as_default(t, t)  # the very object (a tensor default is never compared by value)
    assert not same_as_default(torch.zeros(2), torch.zeros(2))
    kept, defaults = split_kwargs({"eps": math.inf, "weight": torch.ones(1), "extra": 3},
                                  {"eps": 1e-5, "weight": None})
    assert set(kept) == {"eps", "weight", "extra"} and defaults == {"eps": 1e-5}  # no default for tensors
    assert defaults_of(torch.add) is None and defaults_of(torch.Tensor.add) is None  # C callables: left alone
    assert defaults_of(F.softmax)["_stacklevel"] == 3


def test_the_rule_is_framework_neutral():
    """engines.capture.defaults serves any adapter: a wrapper that sees what the caller wrote (MindSpore's) drops
    the defaults a framework module passes explicitly (its nn.Dropout passes training=True) the same way."""
    from engines.capture.defaults import signature_defaults
    from engines.capture.defaults import split_kwargs as neutral_split

    def dropout(input, p=0.5, training=True, *, seed=None):
        return input

    defaults = signature_defaults(dropout)
    assert defaults == {"p": 0.5, "training": True, "seed": None}
    assert neutral_split({"p": 0.0, "training": True}, defaults) == ({"p": 0.0}, {"p": 0.5})
    assert signature_defaults(len) is None and signature_defaults(lambda x: x) is None


def test_record_args_text_is_the_json_module_s_text():
    """``encode_args`` runs the C encoder it made once (engines.capture.records): the text is json's, byte for
    byte, for every kind of value a record's arguments hold, and what json refuses falls back to its ``str``."""
    from engines.capture import records

    assert records._C_ENCODE is not None  # CPython: the reused encoder is the one under test
    values = [
        {"input": [{"t": "input.0"}, {"t": "input.1"}], "kwargs": {"dim": -1, "keepdim": False, "eps": 1e-5}},
        {"f": [math.nan, math.inf, -math.inf, 0.1, -0.0, 1e300], "s": "é\u2028\"\\\n", "n": None, "b": True},
        {"nested": [[[{"a": (1, 2)}]]], 3: "int key", 2.5: "float key", None: "none key", True: "bool key"},
        {"dtype": torch.float32, "obj": object(), "arr": np.float64(1.5)},
        "plain text", 7, 2.5, [], {},
    ]
    for value in values:
        expected = json.dumps(value, separators=(",", ":"), allow_nan=True, default=str)
        assert records.encode_args(value) == expected
    assert records.encode_args(None) == ""
    loop: dict = {"x": 1}
    loop["self"] = loop
    assert records.encode_args(loop) == json.dumps(str(loop))
    assert records.encode_args({(1, 2): "tuple key"}) == json.dumps(str({(1, 2): "tuple key"}))
    # a step's list at once (StepBuffer.build): the same text a record at a time, None as "", and a value the
    # encoder refuses falls back for that value only
    step = values + [None, values[0]]
    assert records.encode_all(step) == [records.encode_args(v) for v in step]
    assert records.encode_all([values[0], loop, None]) == [records.encode_args(values[0]), json.dumps(str(loop)), ""]
    assert records.encode_all([]) == []
