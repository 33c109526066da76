"""L1 record assembly, framework-neutral: an API call's forward record (inputs before the call, outputs after) and
the hooks that observe its backward.

Each adapter intercepts calls its own way (torch's function mode, MindSpore's reversible wrappers) and hands every
captured call to ``ApiRecords.before`` and ``after`` around the real call. What the adapter's subclass brings:
its walkers and tensor type, the record flags of a call (torch marks activation-checkpoint re-runs), whether its
backward can run at all (grad mode), the autograd edges (``input_edge``, ``_sequence_mark``, ``_attach``) and what
counts as the result of a collective that writes into its arguments (``_outputs``).

Keyword arguments equal to the callable's default are not recorded (``engines.capture.defaults``).

An ``out=`` argument is a buffer the call writes its result into: before the call it holds whatever the memory held
(torch.compile's generated code passes freshly allocated, uninitialised buffers), so its row is read after the call,
with the result in it (slot ``input.out``, as the skeleton names it).
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from engines.capture import naming
from engines.capture.backward import PendingBackward
from engines.capture.defaults import split_kwargs
from engines.capture.filters import REASON_DATA_MODE
from engines.capture.flatten import Walkers
from engines.capture.naming import DIRECTION_FORWARD, FLAG_RECOMPUTED, KIND_API

# What ``before`` hands to ``after``: buffer marks (for a rollback), the record, its name, parent and stack, flags,
# the input edges, the sequence mark, whether the backward is observed, whether tensors are saved.
OUT_KWARG = "out"
OUT_SLOT = "input." + OUT_KWARG
OUTPUT_0 = "output.0"
Pre = Tuple[int, int, int, str, str, int, int, List, int, bool, bool]


class ApiRecords:
    """Forward records of API calls and their backward hooks; see the module docstring."""

    walkers: Walkers
    tensor_type: Any = ()
    stack_skip = 0  # interpreter frames of the interception itself above the caller's (for the stack table)
    # exact tensor types a call's result is recorded as itself (``output.0``) unless the call is a collective:
    # what the adapter's ``_outputs`` does with them, without its call
    plain_outputs: Tuple[type, ...] = ()
    # Optional builtins for the per-call path: ``_graph_task_id()`` is -1 when no backward pass runs (then
    # ``_call_flags()`` is 0); ``_grad_enabled()`` is ``_backward_possible(0)``. None: the methods are asked.
    _graph_task_id: Optional[Callable[[], int]] = None
    _grad_enabled: Optional[Callable[[], bool]] = None

    def __init__(self, session: Any) -> None:
        self.session = session
        self._save_all: Optional[bool] = None  # task tensor: every record saves its tensors (read at first use)
        self._may_save: Optional[bool] = None  # any record may save tensors (tensor task, tensor_list)

    # -- what the adapter brings -----------------------------------------------------------------------------
    def _call_flags(self) -> int:
        """Record flags of the call starting now (``naming.FLAG_RECOMPUTED`` for an activation-checkpoint re-run)."""
        return 0

    def _backward_possible(self, flags: int) -> bool:
        """Can this call's backward run at all (grad mode on, not a re-run whose graph is thrown away)?"""
        return True

    def input_edge(self, slot: str, t: Any) -> Any:
        raise NotImplementedError

    def _sequence_mark(self) -> int:
        """Read before the call runs: the first autograd node sequence number it can create (-1: not known)."""
        return -1

    def _attach(self, pending: PendingBackward, edges: List, outputs: List, seq: int, want_inputs: bool,
                want_outputs: bool) -> bool:
        raise NotImplementedError

    def _outputs(self, info: Any, out: Any, args: tuple, kwargs: Dict[str, Any]) -> Tuple[List, bool]:
        """``((slot, tensor) pairs of the result, whether they are new entries whatever their identity)``."""
        return self.walkers.output_tensors(out), False

    def _is_tensor(self, value: Any) -> bool:
        return isinstance(value, self.tensor_type)

    def pause(self) -> Any:
        """Take the call interception off while a hook of the tool works (module and backward hooks run with it
        installed; the tensor operations of their statistics would each be offered to it only to be passed
        through). Returns what ``resume`` puts back (None: nothing was taken off)."""
        return None

    def resume(self, token: Any) -> None:
        return None

    # -- forward ---------------------------------------------------------------------------------------------
    def safe_before(self, info: Any, args: tuple, kwargs: Dict[str, Any],
                    collective: Optional[Dict[str, Any]] = None,
                    extra: Optional[Dict[str, Any]] = None) -> Optional[Pre]:
        """``before``; a failure is reported and the call runs unrecorded (None)."""
        try:
            return self.before(info, args, kwargs, collective, extra)
        except Exception as exc:  # never break training
            self.session.summary.failed("capture of %s" % info.base, exc)
            return None

    def safe_after(self, info: Any, pre: Pre, args: tuple, kwargs: Dict[str, Any], out: Any) -> None:
        """``after``; a failure is reported and the call's rows are taken back."""
        try:
            self.after(info, pre, args, kwargs, out)
        except Exception as exc:  # never break training
            self.session.summary.failed("capture of %s" % info.base, exc)
            self.session.rollback(pre[0], pre[1])

    def before(self, info: Any, args: tuple, kwargs: Dict[str, Any],
               collective: Optional[Dict[str, Any]] = None,
               extra: Optional[Dict[str, Any]] = None) -> Optional[Pre]:
        """Name the call, record its inputs (the session is busy) and take its input edges; None: nothing to do.
        ``collective``: what a collective call is (its op, group, ... in ``args["collective"]``, docs/FORMAT.md);
        ``extra``: more keys of the record's ``args`` (a MindSpore primitive's ``primitive``, docs/FORMAT.md).

        The per-call path: what a session fixed at its start (the filters, data_mode, whether tensors are saved)
        is read from attributes, not asked through calls."""
        s = self.session
        # ``_call_flags`` and ``_backward_possible`` without their calls where the adapter gives their usual case
        # as one builtin each (outside a backward pass: no flags; then grad mode alone decides)
        gid = self._graph_task_id
        flags = 0 if gid is not None and gid() == -1 else self._call_flags()
        counts = (s.recompute_counter if flags & FLAG_RECOMPUTED else s.api_counter).counts
        base = info.base
        index = counts.get(base, 0)
        counts[base] = index + 1
        name = "%s.%d.forward" % (base, index)
        frames = s.modules.frames
        frame = frames[-1] if frames else None
        listed_parent = frame is not None and frame.listed
        filt = s.filter
        reason = None if filt.plain else filt.record_reason(name, listed_parent)
        dm = filt.data_mode
        if reason is None and not dm.forward:  # data_mode backward: no forward record, not even its arguments
            reason = REASON_DATA_MODE
        ge = self._grad_enabled
        want_bwd = (dm.backward and (ge() if ge is not None and not flags else self._backward_possible(flags))
                    and (reason is None or s.backward_may_be_wanted(naming.backward_of(name), listed_parent)))
        if reason is not None:
            s.summary.skipped(reason)
            if not want_bwd:
                return None
        buffer = s.buffer
        rec_name = buffer.rec_name
        marks0, marks1 = len(rec_name), len(buffer.row_slot)
        edges: List = []
        record = -1
        if not s.keep_stacks:
            stack = -1
        elif frame is None:
            stack = s.stacks.current(self.stack_skip)
        else:  # walked up to the enclosing module call (``StackTable.module_key``)
            stack = s.stacks.current(self.stack_skip, frame.anchor, frame.skey)
        parent = frame.name if frame is not None else ""
        save = self._saves(name) if self._may_save is not False else False
        walkers = self.walkers
        rows: List[Tuple[str, Any]] = []
        if reason is None:
            kept_defaults = None
            rec_kwargs = kwargs
            if kwargs and info.defaults is not None:
                rec_kwargs, kept_defaults = split_kwargs(kwargs, info.defaults, self._is_tensor)
            skeleton = walkers.call_rows(args, rec_kwargs, rows)
            if kept_defaults is not None:
                skeleton["defaults"] = {k: walkers.walk(v, "", None) for k, v in kept_defaults.items()}
            if collective is not None:
                skeleton["collective"] = collective
            if extra:
                skeleton.update(extra)
            # ``buffer.add_record`` inline (the per-call path)
            record = marks0
            rec_name.append(name)
            buffer.rec_kind.append(KIND_API)
            buffer.rec_direction.append(DIRECTION_FORWARD)
            buffer.rec_parent.append(parent)
            buffer.rec_stack.append(stack)
            buffer.rec_args.append(skeleton)
            buffer.rec_flags.append(flags)
            if rows and dm.forward and dm.input:
                add_row = s.add_row
                if kwargs and kwargs.get(OUT_KWARG) is not None:
                    for slot, t in rows:
                        if not _is_out_slot(slot):  # an out= buffer is read after the call (the docstring)
                            add_row(record, slot, t, save)
                else:
                    for slot, t in rows:
                        add_row(record, slot, t, save)
        else:
            walkers.call_rows(args, kwargs, rows)
        seq = -1
        if want_bwd:
            input_edge = self.input_edge
            for slot, t in rows:
                e = input_edge(slot, t)
                if e is not None:
                    edges.append(e)
            seq = self._sequence_mark()
        return (marks0, marks1, record, name, parent, stack, flags, edges, seq, want_bwd, save)

    def _saves(self, name: str) -> bool:
        """The session's ``saves(name)`` (task tensor, statistics with ``tensor_list``), without the calls."""
        s = self.session
        if self._may_save is None:  # read at first use; False: no record of the session saves tensors
            self._save_all = bool(s.options.saves_tensors)
            self._may_save = self._save_all or bool(s.filter.tensor_list)
            if not self._may_save:
                return False
        if s.entries.saving_stopped:
            return False
        return self._save_all or (bool(s.filter.tensor_list) and s.filter.saves_tensor_of(name))

    def after(self, info: Any, pre: Pre, args: tuple, kwargs: Dict[str, Any], out: Any) -> None:
        """Record the outputs (the session is busy) and attach the backward hooks."""
        s = self.session
        _, _, record, name, parent, stack, flags, edges, seq, want_bwd, save = pre
        if type(out) in self.plain_outputs and not info.distributed:  # the usual result: ``_outputs`` inline
            outputs, fresh = [(OUTPUT_0, out)], False
        else:
            outputs, fresh = self._outputs(info, out, args, kwargs)
        dm = s.filter.data_mode
        if record >= 0:
            if not isinstance(out, self.tensor_type):
                s.buffer.rec_args[record]["output"] = self.walkers.walk_output(out, None)
            if kwargs and dm.forward and dm.input and kwargs.get(OUT_KWARG) is not None:
                written: List[Tuple[str, Any]] = []
                self.walkers.tensors_in(kwargs[OUT_KWARG], OUT_SLOT, written)
                for slot, t in written:
                    s.add_row(record, slot, t, save)
            if dm.forward and dm.output:
                add_row = s.add_row
                if fresh:
                    for slot, t in outputs:
                        add_row(record, slot, t, save, True)
                else:
                    for slot, t in outputs:
                        add_row(record, slot, t, save)
            if s.record_done_hook:  # a processor's hook (no call for the session's no-op)
                s.record_done(record)
        if want_bwd and outputs:
            # name is "<base>.<index>.forward": its backward record swaps the last word
            pending = PendingBackward(s, name[:-7] + "backward", KIND_API, parent, stack,
                                      flags & ~FLAG_RECOMPUTED)
            if self._attach(pending, edges, outputs, seq, dm.output, dm.input):
                s.pending_backward.append(pending)


def _is_out_slot(slot: str) -> bool:
    """The slot of an ``out=`` argument or of a tensor inside it (``input.out``, ``input.out.0``)."""
    return slot == OUT_SLOT or slot.startswith(OUT_SLOT + ".")
