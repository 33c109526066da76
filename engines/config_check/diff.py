"""Two packs compared: every difference, ordered by how likely it is to change the numbers (docs/CONFIG_CHECK.md).

The order is by *category*, most likely first: what the model computes on (the data, the initial weights), what
the run is told (hyperparameters, arguments, config files), what makes it reproducible (seeds, deterministic
flags), what computes it (framework, device, numerics packages and environment), then what follows from the rest
(weights after a step) and what rarely matters (other packages and environment variables). Within a category,
differences keep the packs' key order.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from schemas.config_check import ConfigCheckPack

#: (category, why it matters), most likely to change the numbers first.
CATEGORIES: Tuple[Tuple[str, str], ...] = (
    ("data", "the model is fed different samples (data, order or preprocessing)"),
    ("weights.init", "the model starts from different weights"),
    ("hyperparameters", "the optimizer is set differently"),
    ("arguments", "the script is run with different arguments"),
    ("config files", "a config file of the training differs"),
    ("seeds", "random state differs (initialisation, dropout, shuffling)"),
    ("deterministic", "kernel choice may differ run to run"),
    ("framework", "another framework build, device or thread count computes the ops"),
    ("packages.numerics", "a library that computes or feeds the numbers is another version"),
    ("environment.numerics", "a variable that changes kernels, communication or threading"),
    ("weights.later", "weights after a step differ: a consequence of the above, or non-determinism if nothing "
                      "above differs"),
    ("packages.other", "another package version (rarely changes the numbers)"),
    ("environment.other", "another environment variable (rarely changes the numbers)"),
)
RANK = {name: i for i, (name, _) in enumerate(CATEGORIES)}
WHY = dict(CATEGORIES)

NUMERICS_PACKAGES = re.compile(
    r"^(torch|torch-npu|torchvision|mindspore|numpy|scipy|transformers|accelerate|deepspeed|megatron.*|mindspeed.*|"
    r"apex|flash-attn|xformers|triton|peft|datasets|tokenizers|sentencepiece|safetensors|jax|jaxlib|"
    r"nvidia-.*|intel-openmp|mkl.*|onednn.*|cann.*)$")
NUMERICS_ENV = re.compile(
    r"^(NCCL_|HCCL_|CUBLAS_|CUDNN_|CUDA_|ASCEND_|OMP_|MKL_|KMP_|OPENBLAS_|PYTORCH_|TORCH_|XLA_|TF_|NVIDIA_TF32|"
    r"MS_|GLOG_|HF_|TOKENIZERS_|PYTHONHASHSEED$|LD_LIBRARY_PATH$|LD_PRELOAD$|CUBLASLT_|NVTE_|MASTER_ADDR$|"
    r"WORLD_SIZE$|LOCAL_WORLD_SIZE$)")
#: Variables that differ between any two launches and say nothing about the setup: not compared.
VOLATILE_ENV = re.compile(
    r"^(_|OLDPWD|SHLVL|PWD|PYTEST_.*|MASTER_PORT|TORCHELASTIC_.*|PROBE_TUI_RUN_ID|SSH_.*|WINDOWID|TMUX.*|"
    r"TERM_SESSION_ID|XDG_SESSION_ID|XDG_RUNTIME_DIR|INVOCATION_ID|JOURNAL_STREAM|SLURM_(JOB_?ID|STEP_ID|TASK_PID|"
    r"JOB_NAME|SUBMIT_DIR|NODELIST|JOB_NODELIST|STEP_NODELIST|TOPOLOGY_ADDR.*|PROCID|LOCALID|NODEID|GTIDS|"
    r"LAUNCH_NODE_IPADDR|SRUN_COMM_PORT|STEP_LAUNCHER_PORT|STEP_RESV_PORTS)|OMPI_.*URI.*|PMIX_.*|HOSTNAME|"
    r"GROUP_RANK|ROLE_RANK|RANK|LOCAL_RANK|ROLE_WORLD_SIZE|GROUP_WORLD_SIZE|TORCH_NCCL_ASYNC_ERROR_HANDLING_.*)$")


def _row(category: str, key: str, a: Optional[str], b: Optional[str], detail: str = "") -> Dict[str, Any]:
    return {"category": category, "key": key, "a": a, "b": b, "why": WHY[category], "detail": detail}


def _mapping(out: List[Dict[str, Any]], category: Any, a: Dict[str, str], b: Dict[str, str],
             prefix: str = "") -> None:
    """Key-by-key differences; ``category`` a name or a function of the key."""
    keys = list(a) + [k for k in b if k not in a]
    for key in keys:
        va, vb = a.get(key), b.get(key)
        if va != vb:
            cat = category(key) if callable(category) else category
            if cat:
                out.append(_row(cat, prefix + key, va, vb))


def _env_category(key: str) -> str:
    if VOLATILE_ENV.match(key):
        return ""
    return "environment.numerics" if NUMERICS_ENV.match(key) else "environment.other"


def _package_category(key: str) -> str:
    return "packages.numerics" if NUMERICS_PACKAGES.match(key) else "packages.other"


def _files(out: List[Dict[str, Any]], a: ConfigCheckPack, b: ConfigCheckPack) -> None:
    for path in list(a.files) + [p for p in b.files if p not in a.files]:
        fa, fb = a.files.get(path), b.files.get(path)
        if fa is None or fb is None:
            out.append(_row("config files", path, "present" if fa else None, "present" if fb else None))
            continue
        if fa.sha256 == fb.sha256:
            continue
        before = len(out)
        _mapping(out, "config files", fa.values, fb.values, prefix=path + ": ")
        if len(out) == before:  # not parsed, or only comments and layout changed
            out.append(_row("config files", path, "sha256 " + fa.sha256[:12], "sha256 " + fb.sha256[:12],
                            "content differs"))


def _weights(out: List[Dict[str, Any]], a: ConfigCheckPack, b: ConfigCheckPack) -> None:
    for label in list(a.weights) + [k for k in b.weights if k not in a.weights]:
        wa, wb = a.weights.get(label), b.weights.get(label)
        category = "weights.init" if label == "init" else "weights.later"
        if wa is None or wb is None:
            out.append(_row(category, label, "taken" if wa is not None else None,
                            "taken" if wb is not None else None))
            continue
        names = list(wa) + [n for n in wb if n not in wa]
        differ = [n for n in names if wa.get(n) != wb.get(n)]
        if differ:
            out.append(_row(category, label, "{} of {} parameters differ".format(len(differ), len(names)),
                            "first: {}".format(differ[0]), detail=", ".join(differ[:50])))


def _data(out: List[Dict[str, Any]], a: ConfigCheckPack, b: ConfigCheckPack) -> None:
    for batch in list(a.data) + [k for k in b.data if k not in a.data]:
        da, db = a.data.get(batch), b.data.get(batch)
        if da is None or db is None:
            out.append(_row("data", batch, "taken" if da is not None else None, "taken" if db is not None else None))
            continue
        if len(da) != len(db):
            out.append(_row("data", batch, "{} samples".format(len(da)), "{} samples".format(len(db))))
        for i, (x, y) in enumerate(zip(da, db)):
            if x != y:
                out.append(_row("data", "{}.sample{}".format(batch, i), x, y))


def diff_packs(a: ConfigCheckPack, b: ConfigCheckPack) -> List[Dict[str, Any]]:
    """Every difference between ``a`` and ``b``, most likely to change the numbers first; each a dict with
    ``category``, ``key``, ``a``, ``b`` (None: absent on that side), ``why`` and ``detail``."""
    out: List[Dict[str, Any]] = []
    _data(out, a, b)
    _weights(out, a, b)
    _mapping(out, "hyperparameters", a.hyperparameters, b.hyperparameters)
    _mapping(out, "arguments", a.command, b.command)
    _files(out, a, b)
    _mapping(out, "seeds", a.seeds, b.seeds)
    _mapping(out, "deterministic", a.deterministic, b.deterministic)
    _mapping(out, "framework", a.framework, b.framework)
    _mapping(out, _package_category, a.packages, b.packages)
    _mapping(out, _env_category, a.environment, b.environment)
    order = {id(row): i for i, row in enumerate(out)}
    out.sort(key=lambda row: (RANK[row["category"]], order[id(row)]))
    return out
