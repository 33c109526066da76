"""The one list of keys msprobe knows and probe-tui does not implement (docs/decisions/0005-foreign-keys.md).

Such a key loads with one warning and is dropped; a key unknown to both tools is an error. Each scope below is
named by the models that allow it (`ConfigModel.foreign_scope`). Some entries carry a check of msprobe's own
rules for the value, so a broken value is still an error (e.g. an unknown key inside `cc_distribution`).

`FOREIGN_SECTIONS` are msprobe task sections with no probe-tui task; the sections of our other tasks (msprobe's
default config.json carries all of them) are accepted silently but must be JSON objects.
"""

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from .errors import did_you_mean, echo

__all__ = ["Foreign", "FOREIGN_KEYS", "FOREIGN_SECTIONS", "FOREIGN_TASKS", "foreign_key", "all_foreign_names"]

Problem = Tuple[str, str, str]  # (path relative to the key, message, hint)
Check = Callable[[Any], List[Problem]]


class Foreign(NamedTuple):
    note: str
    check: Optional[Check] = None


def _is_bool(value: Any) -> List[Problem]:
    return [] if isinstance(value, bool) else [("", f"must be true or false (got {echo(value)})", "")]


def _keys_within(allowed: Tuple[str, ...], value_check: Optional[Callable[[str, Any], List[Problem]]] = None
                 ) -> Check:
    def check(value: Any) -> List[Problem]:
        if not isinstance(value, dict):
            return [("", f"must be an object (got {echo(value)})", "")]
        problems: List[Problem] = []
        for key, item in value.items():
            if key not in allowed:
                problems.append((key, "unknown key", did_you_mean(key, allowed)))
            elif value_check:
                problems.extend(value_check(key, item))
        return problems
    return check


def _cc_value(key: str, value: Any) -> List[Problem]:
    if key == "cc_codeline":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return [] if ok else [(key, "must be a list of strings", "")]
    return [(key, p[1], p[2]) for p in _is_bool(value)]


def _l2_value(key: str, value: Any) -> List[Problem]:
    ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    return [] if ok else [(key, "must be a list of module names", "")]


def _sa_order(value: Any) -> List[Problem]:
    return [] if value in ("s,b,h,d", "b,s,h,d") else [("", f"must be 's,b,h,d' or 'b,s,h,d' (got {echo(value)})", "")]


def _append_output(value: Any) -> List[Problem]:
    ok = isinstance(value, list) and len(value) in (0, 2) and all(isinstance(v, str) for v in value)
    return [] if ok else [("", "must be [] or two timestamps [start, end]", 'e.g. ["Dec03_21-34-40", "Dec03_22-00-00"]')]


_STATIC = ("MindSpore static-graph (kernel dump) option; level L2 sets MindSpore's own dump configuration itself "
           "(docs/MINDSPORE.md)")
_ONLINE = ("msprobe's remote online pre-check (tensors sent to another host) is not offered; the section's "
           "online_check (enabled: true) re-runs the calls in the training process, on the CPU")

FOREIGN_KEYS: Dict[str, Dict[str, Foreign]] = {
    # Top level of every job.
    "job": {
        "extra_info": Foreign("stack and structure records are always kept (msprobe 26.2 option)", _is_bool),
        "risk_level": Foreign("API selection by risk is not used: every API of the capture set is recorded; "
                              "use list, scope or the apis filter"),
        "enable_dataloader": Foreign("deprecated msprobe option (auto start/stop from the DataLoader)", _is_bool),
        "dump_enable": Foreign("hot-reloading the config during training is not implemented", _is_bool),
        "custom_op_namespaces": Foreign("custom op namespaces are not auto-registered"),
        "load": Foreign("replacing module inputs with dumped tensors is not implemented"),
        "is_regex_valid": Foreign("internal msprobe flag"),
        "is_deterministic": Foreign("deterministic algorithms are not switched on by probe-tui (msprobe 1.0.x "
                                    "option); 'seed' seeds every generator", _is_bool),
        "acl_config": Foreign("the L2 kernel dump's CANN acl.json (msprobe 1.0.x option); L2 is not offered"),
    },
    # Top-level keys of msprobe's common config that mean nothing for grad_probe and monitor.
    "no_capture_level": {
        "level": Foreign("this task has no capture level"),
        "async_dump": Foreign("this task has no async mode", _is_bool),
        "precision": Foreign("this task computes its metrics in float32 or wider"),
    },
    # statistics / tensor sections.
    "dump_section": {
        "slice": Foreign("tensor slicing (msprobe 26.2) is not implemented"),
        "request_id": Foreign("vLLM request slicing (msprobe 26.2) is not implemented"),
        "file_format": Foreign(_STATIC),
        "device": Foreign(_STATIC),
        "precision": Foreign(_STATIC + " (the statistics precision is the top-level 'precision')"),
        "is_regex_valid": Foreign("internal msprobe flag"),
        "bench_path": Foreign("diff_check against a reference dump (msprobe 26.2) is not implemented; "
                              "run a compare job instead"),
        "online_run_ut": Foreign(_ONLINE, _is_bool),
        "online_run_ut_recompute": Foreign(_ONLINE, _is_bool),
        "nfs_path": Foreign(_ONLINE),
        "host": Foreign(_ONLINE),
        "port": Foreign(_ONLINE),
        "tls_path": Foreign(_ONLINE),
        "backward_input": Foreign("the L2 kernel dump's saved backward inputs (msprobe 1.0.x option); L2 is not "
                                  "offered"),
    },
    "overflow_check": {
        "check_mode": Foreign(_STATIC + " (MindSpore < 2.3)"),
    },
    "free_benchmark": {},
    "monitor": {
        "cc_distribution": Foreign(
            "collective-communication monitoring is not implemented",
            _keys_within(("enable", "cc_codeline", "cc_pre_hook", "cc_log_only"), _cc_value)),
        "l2_targets": Foreign(
            "L2 feature monitoring (attention entropy, linear stable rank, MoE routers) is not implemented",
            _keys_within(("attention_hook", "linear_hook", "moe_router_weight_hook", "moe_router_logit_hook"),
                         _l2_value)),
        "recording_l2_features": Foreign("L2 feature monitoring is not implemented", _is_bool),
        "sa_order": Foreign("L2 feature monitoring is not implemented", _sa_order),
        "append_output": Foreign("every run writes a new run folder; appending to old output is not offered",
                                 _append_output),
        "dynamic_on": Foreign("dynamic on/off through the config file is not implemented", _is_bool),
    },
    # monitor.alert.
    "monitor_alert": {
        "inform": Foreign("sending alerts to a database or by mail is not implemented; anomalies.jsonl holds them "
                          "(alert.dump)"),
    },
    # msprobe's run_ut / acc_check section (config.json task run_ut) and its config.yaml.
    "acc_check": {
        "error_data_path": Foreign("the inputs and outputs of failing APIs are not saved apart: the dump holds them "
                                   "and `probe-tui parse --row` exports them"),
        "precision": Foreign("the CSVs always carry 14 decimals"),
        "jit_compile": Foreign("the reference runs on the CPU; the dump's outputs are the device's", _is_bool),
        "quantization_api_list": Foreign("quantization APIs are judged as the others"),
        "is_online": Foreign(_ONLINE, _is_bool),
        "nfs_path": Foreign(_ONLINE),
        "host": Foreign(_ONLINE),
        "port": Foreign(_ONLINE),
        "rank_list": Foreign(_ONLINE + "; its ranks are the capture's rank"),
        "tls_path": Foreign(_ONLINE),
    },
    # msprobe's classic compare.json.
    "compare": {
        "stack_path": Foreign("call stacks are read from the runs themselves"),
        "is_print_compare_log": Foreign("per-row logs are not printed; the results store has every row", _is_bool),
        "rank_id": Foreign(_STATIC + "; use rank"),
        "step_id": Foreign(_STATIC + "; use step"),
        "common": Foreign(_STATIC),
        "map_dict": Foreign(_STATIC),
        "parallel_merge": Foreign("merging tensor/pipeline-parallel ranks for graph builds is not implemented"),
        "overflow_check": Foreign("graph-visualization option; not used by compare"),
    },
}

# msprobe task sections without a probe-tui task: one warning each, content ignored.
FOREIGN_SECTIONS: Dict[str, str] = {
    "run_ut": "msprobe's run_ut options apply to task acc_check (a config with task run_ut loads as one)",
    "structure": "structure-only dumps are not a separate task: statistics at L0/mix records the structure",
    "nan_check": "nan_check is msprobe 26.2's NPU-only overflow check; use the overflow_check task",
    "diff_check": "diff_check is not implemented; capture with summary_mode md5 and run a compare job",
    "exception_dump": "exception_dump is not implemented",
    "multi_run_ut": "use task acc_check with workers",
}

# msprobe task names that have no probe-tui task, with what to use instead.
FOREIGN_TASKS: Dict[str, str] = {
    "multi_run_ut": "use task acc_check with workers (acc-check --workers N)",
    "structure": "use task statistics at level L0 or mix, which records the module structure",
    "nan_check": "use task overflow_check",
    "diff_check": "capture both runs with summary_mode md5 and use task compare",
    "exception_dump": "not implemented",
}


def foreign_key(scopes: Tuple[str, ...], key: str) -> Optional[Foreign]:
    for scope in scopes:
        entry = FOREIGN_KEYS.get(scope, {}).get(key)
        if entry is not None:
            return entry
    return None


def all_foreign_names(scopes: Tuple[str, ...]) -> List[str]:
    return [key for scope in scopes for key in FOREIGN_KEYS.get(scope, {})]
