"""The bad cases of docs/reference/msprobe-tasks.md §14 C1, C3, C4, C8, F1, G1, M1: each is rejected, naming the field."""

import pytest

import schemas


def _errors(config):
    with pytest.raises(schemas.ConfigError) as info:
        schemas.load_config(config, on_warning=lambda *a: None)
    err = info.value
    assert err.errors, "a ConfigError must carry issues"
    assert str(err) == "\n".join(str(issue) for issue in err.errors)
    return err


def _assert_rejected(config, path, *fragments):
    err = _errors(config)
    paths = [issue.path for issue in err.errors]
    assert path in paths, f"expected an issue at {path!r}, got {paths}"
    issue = err.errors[paths.index(path)]
    text = str(issue)
    assert text.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    return issue


# ----------------------------------------------------------------------------------------------------------- C1
C1_BAD = [
    ("rank", ["6-4"], "rank[0]", "6-4"),
    ("rank", [0, "a"], "rank[1]", "'a'"),
    ("rank", [-1], "rank[0]", "-1"),
    ("rank", [10 ** 7], "rank[0]", "10000000"),
    ("rank", [1e7], "rank[0]", "10000000.0"),
    ("rank", [True], "rank[0]", "true"),
    ("rank", [1, 2.5], "rank[1]", "2.5"),
    ("rank", "0-3", "rank", "list"),
    ("rank", 3, "rank", "list"),
    ("rank", {"0": 1}, "rank", "list"),
    ("rank", ["1-"], "rank[0]", "1-"),
    ("rank", ["1-2-3"], "rank[0]", "1-2-3"),
    ("rank", ["0-1000001"], "rank[0]", "1000000"),
    ("rank", [None], "rank[0]", "None"),
    ("step", ["6-4"], "step[0]", "6-4"),
    ("step", [False], "step[0]", "false"),
    ("step", ["x-1"], "step[0]", "x-1"),
    ("step", [1, 2, -3], "step[2]", "-3"),
    ("step", 1, "step", "list"),
]


@pytest.mark.parametrize("key,value,path,fragment", C1_BAD, ids=[f"{k}={v!r}" for k, v, _, _ in C1_BAD])
def test_c1_rank_step_rejected(key, value, path, fragment):
    _assert_rejected({"task": "statistics", key: value}, path, fragment)


def test_c1_rank_step_normalised():
    job = schemas.load_config({"task": "tensor", "rank": [1, "4-6"], "step": ["3", 0, "2-3", 2],
                               "tensor": {"list": ["relu"]}})
    assert job.rank == [1, 4, 5, 6]
    assert job.step == [0, 2, 3]
    assert schemas.load_config({"task": "statistics", "rank": None}).rank == []


def test_c1_every_bad_element_reported_at_once():
    err = _errors({"task": "statistics", "rank": ["6-4", "a", -1, 1e7, True]})
    assert [i.path for i in err.errors] == [f"rank[{n}]" for n in range(5)]


# ----------------------------------------------------------------------------------------------------------- C3
C3_BAD = [
    (["all", "forward"], "statistics.data_mode", "'all' cannot be combined"),
    (["forward", "all"], "statistics.data_mode", "'all' cannot be combined"),
    (["forward", "backward", "input", "output", "forward"], "statistics.data_mode", "at most 4"),
    (["forward", "inptu"], "statistics.data_mode[1]", "did you mean 'input'"),
    (["everything"], "statistics.data_mode[0]", '"everything"'),
    (["forward", "forward"], "statistics.data_mode", "twice"),
    ([], "statistics.data_mode", "empty"),
    ([1], "statistics.data_mode[0]", "1"),
    ({"forward": True}, "statistics.data_mode", "list"),
]


@pytest.mark.parametrize("value,path,fragment", C3_BAD, ids=[repr(v) for v, _, _ in C3_BAD])
def test_c3_data_mode_rejected(value, path, fragment):
    _assert_rejected({"task": "statistics", "statistics": {"data_mode": value}}, path, fragment)
    tensor_path = path.replace("statistics.", "tensor.")
    _assert_rejected({"task": "tensor", "tensor": {"list": ["x"], "data_mode": value}}, tensor_path)


def test_c3_data_mode_accepted_forms():
    job = schemas.load_config({"task": "statistics", "statistics": {"data_mode": ["forward", "input"]}})
    assert job.statistics.data_mode == ["forward", "input"]
    assert schemas.load_config({"task": "statistics", "statistics": {"data_mode": "backward"}}) \
        .statistics.data_mode == ["backward"]
    assert schemas.load_config({"task": "statistics"}).statistics.data_mode == ["all"]


# ----------------------------------------------------------------------------------------------------------- C4
API_A, API_B = "Functional.linear.0.forward", "Torch.matmul.3.backward"
MOD_A, MOD_B = "Module.layers.0.Block.forward.0", "Module.head.Linear.backward.1"
C4_BAD = [
    ("L1", [API_A], "statistics.scope", "exactly two"),
    ("L1", [API_A, API_B, API_A], "statistics.scope", "exactly two"),
    ("L1", "Functional.linear.0.forward", "statistics.scope", "list"),
    ("L1", [API_A, MOD_A], "statistics.scope[1]", "not an API name"),
    ("L1", ["relu", API_B], "statistics.scope[0]", "not an API name"),
    ("L1", ["Functional.linear.forward.0", API_B], "statistics.scope[0]", "not an API name"),
    ("L0", [API_A, MOD_A], "statistics.scope[0]", "not a module name"),
    ("L0", [MOD_A, "Module.head.Linear.forward"], "statistics.scope[1]", "not a module name"),
    ("mix", [API_A, "Block.forward.0"], "statistics.scope[1]", "neither an API nor a module"),
    ("L1", [API_A, ""], "statistics.scope", "empty"),
]


@pytest.mark.parametrize("level,scope,path,fragment", C4_BAD, ids=[f"{lv}:{s!r}" for lv, s, _, _ in C4_BAD])
def test_c4_scope_rejected(level, scope, path, fragment):
    _assert_rejected({"task": "statistics", "level": level, "statistics": {"scope": scope}}, path, fragment)


def test_c4_scope_accepted_per_level():
    assert schemas.load_config({"task": "statistics", "level": "L1", "statistics": {"scope": [API_A, API_B]}})
    assert schemas.load_config({"task": "statistics", "level": "L0", "statistics": {"scope": [MOD_A, MOD_B]}})
    assert schemas.load_config({"task": "statistics", "level": "mix", "statistics": {"scope": [API_A, MOD_B]}})
    # MindSpeed and MintDistributed are valid prefixes (msprobe forgets them, docs/reference/msprobe-tasks.md §13 #18).
    scope = ["MindSpeed.npu_rotary.0.forward", "MintDistributed.all_reduce.2.forward"]
    assert schemas.load_config({"task": "tensor", "tensor": {"scope": scope, "list": []}})
    job = schemas.load_config({"task": "statistics", "statistics": {"list": ["relu"]}})
    assert job.statistics.list == ["relu"]


# ----------------------------------------------------------------------------------------------------------- C8
C8_BAD = [
    ({"task": "statistics", "levle": "L1"}, "levle", "did you mean 'level'"),
    ({"task": "statistics", "dump_pth": "x"}, "dump_pth", "did you mean 'dump_path'"),
    ({"task": "statistics", "data_mode": ["all"]}, "data_mode", "belongs in the 'statistics' section"),
    ({"task": "statistics", "statistics": {"data_mod": ["all"]}}, "statistics.data_mod", "did you mean 'data_mode'"),
    ({"task": "statistics", "statistics": {"level": "L0"}}, "statistics.level", "top-level key"),
    ({"task": "tensor", "tensor": {"tensor_list": ["x"]}}, "tensor.tensor_list", "option of task statistics"),
    ({"task": "statistics", "statistics": {"summary": "md5"}}, "statistics.summary", "did you mean 'summary_mode'"),
    ({"task": "statistics", "target": {"demo": {"step": 3}}}, "target.demo.step", "did you mean 'steps'"),
    ({"task": "statistics", "target": {"demo": {"faults": {"fp16_overflw": {"layer": 0}}}}},
     "target.demo.faults.fp16_overflw", "did you mean 'fp16_overflow'"),
    ({"task": "statistics", "output": {"compresion": "gzip"}}, "output.compresion", "did you mean 'compression'"),
    ({"task": "monitor", "monitor": {"wg_distributon": True}}, "monitor.wg_distributon",
     "did you mean 'wg_distribution'"),
    ({"task": "monitor", "monitor": {"alert": {"rules": [{"rule_name": "AnomalyNan", "arg": {}}]}}},
     "monitor.alert.rules[0].arg", "did you mean 'args'"),
    ({"task": "monitor", "monitor": {"targets": {"fc": {"inputs": "tensor"}}}}, "monitor.targets.fc.inputs",
     "did you mean 'input'"),
    ({"task": "monitor", "rank": [0], "monitor": {"wg_distribution": True}}, "rank", "module_ranks"),
    ({"task": "compare", "compare": {"target_path": "a", "golden_path": "b", "fuzzy": True}}, "compare.fuzzy",
     "did you mean 'fuzzy_match'"),
    ({"task": "statistics", "statistcs": {}}, "statistcs", "did you mean 'statistics'"),
    ({"task": "statistics", "tensor": []}, "tensor", "must be an object"),
    ({"task": "statistcs"}, "task", "did you mean 'statistics'"),
    ({"task": "run_ut"}, "acc_check", "required"),
    ({"task": "multi_run_ut"}, "task", "acc_check"),
    ({"task": 3}, "task", "string"),
]


@pytest.mark.parametrize("config,path,fragment", C8_BAD, ids=[p for _, p, _ in C8_BAD])
def test_c8_unknown_keys_rejected(config, path, fragment):
    _assert_rejected(config, path, fragment)


def test_c8_all_problems_reported_together():
    err = _errors({
        "task": "statistics", "levle": "L1", "rank": ["6-4"], "async_dump": "false",
        "statistics": {"data_mod": ["all"], "summary_mode": "sha"},
        "target": {"demo": {"stepz": 3}},
    })
    paths = {i.path for i in err.errors}
    assert {"levle", "rank[0]", "async_dump", "statistics.data_mod", "statistics.summary_mode",
            "target.demo.stepz"} <= paths


# ----------------------------------------------------------------------------------------------------------- F1
def fb(**section):
    return {"task": "free_benchmark", "free_benchmark": section}


F1_BAD = [
    (fb(fuzz_device="cpu"), "free_benchmark.fuzz_device", "to_cpu"),
    (fb(pert_mode="to_cpu"), "free_benchmark.fuzz_device", "cpu"),
    (fb(handler_type="fix", if_preheat=True), "free_benchmark.if_preheat", "fix"),
    (fb(handler_type="fix", fuzz_stage="backward", list=["matmul"]), "free_benchmark.fuzz_stage", "forward"),
    (fb(handler_type="fix", pert_mode="add_noise"), "free_benchmark.pert_mode", "improve_precision or to_cpu"),
    (fb(scope=["Torch.matmul.0.forward"], list=["matmul"]), "free_benchmark.list", "scope"),
    (fb(fuzz_stage="backward"), "free_benchmark.list", "backward"),
    (fb(scope=["matmul"]), "free_benchmark.scope", "full API call name"),
    (fb(preheat_step=0), "free_benchmark.preheat_step", "0"),
    (fb(preheat_step=-2, if_preheat=True), "free_benchmark.preheat_step", "-2"),
    (fb(max_sample=0), "free_benchmark.max_sample", "0"),
    (fb(preheat_step="15"), "free_benchmark.preheat_step", "integer"),
    (fb(preheat_step=1.5), "free_benchmark.preheat_step", "integer"),
    (fb(max_sample=True), "free_benchmark.max_sample", "integer"),
    (fb(if_preheat="true"), "free_benchmark.if_preheat", "without quotes"),
    (fb(if_preheat=1), "free_benchmark.if_preheat", "true or false"),
    (fb(pert_mode="add_nosie"), "free_benchmark.pert_mode", "did you mean 'add_noise'"),
    (fb(handler_type="repair"), "free_benchmark.handler_type", "'check', 'fix'"),
    (fb(fuzz_level="L2"), "free_benchmark.fuzz_level", "'L1'"),
    (fb(fuzz_stage="both"), "free_benchmark.fuzz_stage", "'forward', 'backward'"),
    (fb(fuzz_device="gpu"), "free_benchmark.fuzz_device", "'npu', 'cpu'"),
    ({"task": "free_benchmark", "level": "mix"}, "level", "not available for task free_benchmark"),
]


@pytest.mark.parametrize("config,path,fragment", F1_BAD, ids=[f"{p}:{f}" for _, p, f in F1_BAD])
def test_f1_free_benchmark_rejected(config, path, fragment):
    _assert_rejected(config, path, fragment)


def test_f1_defaults_and_valid_combinations():
    section = schemas.load_config({"task": "free_benchmark"}).free_benchmark
    assert section.max_sample == 20  # the documented value, not msprobe's 15
    assert (section.preheat_step, section.if_preheat, section.pert_mode, section.handler_type) == \
        (15, False, "improve_precision", "check")
    assert schemas.load_config(fb(fuzz_device="cpu", pert_mode="to_cpu", handler_type="fix"))
    assert schemas.load_config(fb(fuzz_stage="backward", list=["matmul"], pert_mode="add_noise"))
    assert schemas.load_config(fb(if_preheat=True, preheat_step=5, max_sample=3))


# ----------------------------------------------------------------------------------------------------------- G1
def gp(**section):
    return {"task": "grad_probe", "grad_probe": section}


G1_BAD = [
    (gp(bounds=5), "grad_probe.bounds", "list"),
    (gp(bounds="[-1, 0, 1]"), "grad_probe.bounds", "list"),
    (gp(bounds=[-1, "0", 1]), "grad_probe.bounds[1]", "not a number"),
    (gp(bounds=[True, 2]), "grad_probe.bounds[0]", "not a number"),
    (gp(bounds=[None]), "grad_probe.bounds[0]", "not a number"),
    (gp(bounds=[0, 2 ** 63]), "grad_probe.bounds[1]", "int64"),
    (gp(bounds=[-(2 ** 63) - 1, 0]), "grad_probe.bounds[0]", "int64"),
    (gp(bounds=[-1e30, 1e19]), "grad_probe.bounds[1]", "int64"),
    (gp(bounds=[1, 0]), "grad_probe.bounds", "ascending"),
    (gp(bounds=[0, 0.5, 0.5]), "grad_probe.bounds", "ascending"),
    (gp(bounds=[]), "grad_probe.bounds", "at least one"),
    (gp(grad_level="L3"), "grad_probe.grad_level", "'L0', 'L1', 'L2'"),
    (gp(grad_level="l1"), "grad_probe.grad_level", "did you mean 'L1'"),
    (gp(param_list="fc.weight"), "grad_probe.param_list", "list"),
    (gp(param_list=["fc.weight", 3]), "grad_probe.param_list[1]", "string"),
]


@pytest.mark.parametrize("config,path,fragment", G1_BAD, ids=[f"{p}:{f}" for _, p, f in G1_BAD])
def test_g1_grad_probe_rejected(config, path, fragment):
    _assert_rejected(config, path, fragment)


def test_g1_bounds_accepted():
    assert schemas.load_config(gp(bounds=[-(2 ** 63), -0.5, 0, 2 ** 63 - 1])).grad_probe.bounds[0] == -(2 ** 63)
    assert schemas.load_config({"task": "grad_probe"}).grad_probe.bounds == [-1, 0, 1]
    assert schemas.load_config(gp(bounds=[0.25])).grad_probe.grad_level == "L1"


# ----------------------------------------------------------------------------------------------------------- M1
def mon(**section):
    return {"task": "monitor", "monitor": {"wg_distribution": True, **section}}


M1_BAD = [
    (mon(ops=["nrom"]), "monitor.ops[0]", "did you mean 'norm'"),
    (mon(ops="norm"), "monitor.ops", "list"),
    (mon(eps="1e-8"), "monitor.eps", "number"),
    (mon(eps=True), "monitor.eps", "number"),
    (mon(eps=0), "monitor.eps", "greater than 0"),
    (mon(ndigits=0), "monitor.ndigits", "at least 1"),
    (mon(ndigits=21), "monitor.ndigits", "at most 20"),
    (mon(ndigits=6.0), "monitor.ndigits", "integer"),
    (mon(step_count_per_record=0), "monitor.step_count_per_record", "at least 1"),
    (mon(step_count_per_record=1_000_001), "monitor.step_count_per_record", "at most 1000000"),
    (mon(start_step=-1), "monitor.start_step", "at least 0"),
    (mon(step_interval=0), "monitor.step_interval", "at least 1"),
    (mon(collect_times=0), "monitor.collect_times", "at least 1"),
    (mon(alert={"rules": [{"rule_name": "AnomalyTurb", "args": {"threshold": 0.5}}]}),
     "monitor.alert.rules[0].rule_name", "did you mean 'AnomalyTurbulence'"),
    (mon(alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": -0.1}}]}),
     "monitor.alert.rules[0].args.threshold", "at least 0"),
    (mon(alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": "0.5"}}]}),
     "monitor.alert.rules[0].args.threshold", "number"),
    (mon(alert={"rules": [{"rule_name": "AnomalyTurbulence"}]}),
     "monitor.alert.rules[0].args.threshold", "required"),
    (mon(alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1, "direction": "sideways"}}]}),
     "monitor.alert.rules[0].args.direction", "'up', 'down', 'both'"),
    (mon(alert={"rules": [{"rule_name": "AnomalyNan", "args": {"direction": "up"}}]}),
     "monitor.alert.rules[0].args.direction", "AnomalyTurbulence only"),
    (mon(alert={"rules": [], "dump": "yes"}), "monitor.alert.dump", "true or false"),
    (mon(cc_distribution={"enable": True, "cc_codelin": []}), "monitor.cc_distribution.cc_codelin",
     "did you mean 'cc_codeline'"),
    (mon(cc_distribution={"enable": "yes"}), "monitor.cc_distribution.enable", "true or false"),
    (mon(l2_targets={"attn_hook": []}), "monitor.l2_targets.attn_hook", "did you mean 'attention_hook'"),
    (mon(sa_order="s,h,b,d"), "monitor.sa_order", "s,b,h,d"),
    (mon(module_ranks=["a"]), "monitor.module_ranks[0]", "'a'"),
    (mon(module_ranks=[True]), "monitor.module_ranks[0]", "true"),
    (mon(module_ranks=["3-1"]), "monitor.module_ranks[0]", "3-1"),
    (mon(mg_direction="yes"), "monitor.mg_direction", "true or false"),
    (mon(mg_distribution=True), "monitor.mg_distribution", "did you mean 'mg_direction'"),
    (mon(monitor_mbs_grad=1), "monitor.monitor_mbs_grad", "true or false"),
    (mon(forward_only=True, backward_only=True), "monitor.backward_only", "forward_only"),
    (mon(format="xml"), "monitor.format[0]", "'hdf5', 'csv', 'tensorboard'"),
    (mon(targets=["layers.0"]), "monitor.targets", "object"),
    (mon(targets={"layers.0": {"input": "tuple[2]:5"}}), 'monitor.targets["layers.0"].input', "outside"),
    (mon(targets={"layers.0": {"output": "list[2]"}}), 'monitor.targets["layers.0"].output', "selector"),
]


@pytest.mark.parametrize("config,path,fragment", M1_BAD, ids=[f"{p}:{f}" for _, p, f in M1_BAD])
def test_m1_monitor_rejected(config, path, fragment):
    _assert_rejected(config, path, fragment)


def test_m1_monitor_normalisation():
    section = schemas.load_config(mon(ops=["max", "shape", "max", "min"], module_ranks=[0, "2-3"],
                                      format="csv")).monitor
    assert section.ops == ["max", "min", "shape", "dtype"]  # deduplicated, shape/dtype appended once
    assert section.module_ranks == [0, 2, 3]  # ranges accepted (msprobe takes ints only)
    assert section.format == ["hdf5", "csv"]  # msprobe's string form; hdf5 always
    assert schemas.load_config(mon(ops=[])).monitor.ops == ["norm", "shape", "dtype"]
    assert schemas.load_config(mon(ops=["shape"])).monitor.ops == ["norm", "shape", "dtype"]
    assert schemas.load_config(mon(eps=0.001, ndigits=20)).monitor.eps == 0.001
    assert schemas.load_config(mon(eps=1)).monitor.eps == 1.0  # an int is a number
    rules = schemas.load_config(mon(alert={"rules": [
        {"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}},
        {"rule_name": "AnomalyNan"}]})).monitor.alert.rules
    assert rules[0].args.direction == "up" and rules[0].args.include_inf is None
    assert rules[1].args.include_inf is True and rules[1].args.threshold is None
