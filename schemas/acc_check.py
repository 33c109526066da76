"""The API accuracy pre-check job (msprobe's run_ut / acc_check): replay every captured API call of a dump on the
CPU reference and judge the dump's outputs with msprobe's standards (docs/ACC_CHECK.md)."""

from typing import List, Literal, Optional

from .base import ConfigModel
from .common import JobBase
from .types import RankList, field

__all__ = ["AccCheckReference", "AccCheckSection", "AccCheckJob"]


class AccCheckReference(ConfigModel):
    """Where and in which dtype each call is run again (docs/decisions/0026-acc-check-reference.md)."""

    dtype: Literal["auto", "float64", "float32"] = field(
        "auto", "The reference dtype. auto: float64 for a call whose floating inputs are float32 (or wider), "
                "float32 as soon as one is float16/bfloat16 (msprobe's choice). float64 / float32: that dtype for "
                "every call (float32 on float32 inputs judges against a second run in the device's own dtype).")
    device: str = field(
        "cpu", "Where the reference runs: cpu, or a device of this machine's PyTorch (cuda, cuda:1, npu:0: a GPU "
               "reference for an NPU dump). MindSpore dumps replay on the CPU only.", min_length=1)


class AccCheckSection(ConfigModel):
    foreign_scope = ("acc_check",)

    path: str = field(
        ..., "The dump to check (msprobe's api_info / dump.json): a probe-tui tensor run (its folder, `latest`, the "
             "dump_path, a rank folder) or an msprobe dump (dump.json, step, rank or dump folder).", min_length=1)
    output_path: Optional[str] = field(
        None, "Folder for the results. Unset: a new run folder under dump_path. A folder holding an interrupted "
              "check continues it.", min_length=1)
    backward: bool = field(True, "Also replay the backward calls whose gradients and forward inputs the dump kept.")
    generate: bool = field(
        True, "Calls whose input tensors the dump did not save (a statistics dump) replay from inputs generated from "
              "each record's shape, dtype, min and max (seeded; msprobe's random mode), the device side run on this "
              "machine as recorded; their results say so. false: list them as not replayed.")
    api_list: List[str] = field(
        default_factory=list, description="Check only these APIs (short names: softmax, linear, add_; msprobe's "
                                          "white_list); empty = all.")
    black_list: List[str] = field(default_factory=list, description="Never check these APIs (wins over api_list).")
    rank: RankList = field(default_factory=list, description="Ranks to check; empty = all.")
    step: RankList = field(default_factory=list, description="Steps to check; empty = all.")
    reference: AccCheckReference = field(
        default_factory=AccCheckReference, description="Where and in which dtype the calls run again.")
    workers: int = field(1, "Processes replaying APIs at once (one writes the results).", ge=1, le=64,
                         advanced=True)


class AccCheckJob(JobBase):
    """Replay each API call of a dump on the CPU in a wider dtype and judge the recorded outputs against it."""

    task: Literal["acc_check"] = field("acc_check", "Check every API of a dump against a CPU reference.")
    acc_check: AccCheckSection = field(..., "Which dump to check and how.")
