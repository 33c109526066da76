"""Placing the kernels MindSpore expands inline (``Expand/_Dense/MatMul-op0``: no cell) under their cell from the
graph's IR dump, and file scopes the execution order lists under another number (no MindSpore needed: the IR and
names are written here in the form MindSpore 2.10 writes them)."""

from engines.adapters.mindspore.graph_kernels import Kernel, scope_name
from engines.adapters.mindspore.graph_scopes import expanded_scopes, graph_root, read_ir

NET = "Default/network-WithLoss/net-Net"
F_TOP = "/x/cell_wrapper.py:423~438, 4~19/    def construct(self, *inputs):/"
F_NET = "/x/model.py:10~12, 4~8/    def construct(self, x):/"
F_LOOP = "/x/model.py:11, 8~20/        for block in self.blocks:/"
F_BLOCK = "/x/model.py:20~22, 4~8/    def construct(self, x):/"
F_SCALE = "/x/model.py:21, 8~20/        s = ops.matmul(q, k) * self.scale/"
F_LIN_CALL = "/x/model.py:22, 8~20/        return self.fc(s)/"
F_LIN = "/x/model.py:30~32, 4~8/    def construct(self, x):/"
F_DENSE = "/x/model.py:31, 8~20/        return ops.dense(x, self.weight, self.bias)/"


def _node(i, op, scope, frames=(), args=(), backward=False):
    lines = ["  %%%d(CNode_%d) = %s(%s)" % (i, i, op, ", ".join("%%%d" % a for a in args)),
             "      : (<Tensor[Float32], (4, 4)>) -> (<Tensor[Float32], (4, 4)>)",
             "      # Fullname with scope: (%s)" % scope]
    if frames:
        lines.append("      # Corresponding forward node candidate:" if backward
                     else "      # Corresponding code candidate:")
        lines += ["      # In file %s" % f for f in frames]
    return lines


def _ir(tmp_path):
    block = (F_TOP, F_NET, F_LOOP, F_BLOCK)
    lines = ["# IR entry: @kernel_graph0", "subgraph @kernel_graph0() {"]
    n = 0
    for b in (0, 1):  # two blocks on one source path (the loop): told apart by the nodes next to them
        cell = "%s/blocks-CellList/%d-Block" % (NET, b)
        lines += _node(n, "Transpose", cell + "/Transpose-op%d" % b, block + (F_SCALE,))
        lines += _node(n + 1, "BatchMatMul", "Expand/_MatMulExt/BatchMatMul-op%d" % b, block + (F_SCALE,), (n,))
        lines += _node(n + 2, "Load", cell + "/fc-Linear/Load-op%d" % b)  # a Linear's only own node: no frames
        frames = block + (F_LIN_CALL, F_LIN, F_DENSE)
        lines += _node(n + 3, "Reshape", "Expand/_Dense/Reshape-op%d" % (2 * b), frames, (n + 1,))
        lines += _node(n + 4, "MatMul", "Expand/_Dense/MatMul-op%d" % b, frames, (n + 3, n + 2))
        lines += _node(n + 5, "Reshape", "Expand/_Dense/Reshape-op%d" % (2 * b + 1), frames, (n + 4,))
        n += 6
    grad = "Gradients/%s/blocks-CellList/1-Block/fc-Linear/Grad_Dense" % NET
    lines += _node(n, "Reshape", grad + "/Reshape-op0", (F_TOP,), backward=True)
    lines += _node(n + 1, "ReduceSum", "Expand/_SumExt/ReduceSum-op0", (F_TOP, F_NET), (n,), backward=True)
    lines += ["}"]
    path = tmp_path / "g.ir"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_expanded_kernels_are_placed_under_their_cells(tmp_path):
    nodes = read_ir(_ir(tmp_path))
    assert nodes[1].name == "Expand/_MatMulExt/BatchMatMul-op0" and nodes[1].operands == ("1:0",)
    placed = expanded_scopes(nodes)
    b0, b1 = NET + "/blocks-CellList/0-Block", NET + "/blocks-CellList/1-Block"
    # frames: made directly in the block's construct, the block nearest in the IR
    assert placed["Expand/_MatMulExt/BatchMatMul-op0"] == b0 + "/Expand/_MatMulExt/BatchMatMul-op0"
    assert placed["Expand/_MatMulExt/BatchMatMul-op1"] == b1 + "/Expand/_MatMulExt/BatchMatMul-op1"
    # a Linear with no framed node: the parameter it reads, then the rest of the expansion along its edges
    assert placed["Expand/_Dense/MatMul-op1"] == b1 + "/fc-Linear/Expand/_Dense/MatMul-op1"
    assert placed["Expand/_Dense/Reshape-op0"] == b0 + "/fc-Linear/Expand/_Dense/Reshape-op0"
    assert placed["Expand/_Dense/Reshape-op3"] == b1 + "/fc-Linear/Expand/_Dense/Reshape-op3"
    # backward: the gradient node it reads
    assert placed["Expand/_SumExt/ReduceSum-op0"].startswith("Gradients/%s/fc-Linear/Grad_Dense/Expand/" % b1)


def test_a_file_scope_missing_from_the_execution_order_keeps_its_cell():
    scopes = {(NET + "/drop-Dropout/Generator-op5").replace("/", "_"): NET + "/drop-Dropout/Generator-op5"}
    name = (NET + "/drop-Dropout/Generator-op0").replace("/", "_")
    assert scope_name(name, scopes) == NET + "/drop-Dropout/Generator-op0"
    assert scope_name("Parameter#0", scopes) == "Parameter#0"


def _jit_ir(tmp_path, loads):
    """A @jit cell's graph (scopes start at the jitted cell: ``Default/fc1-Linear``), the construct's source."""
    source = tmp_path / "model.py"
    source.write_text("class Block:\n    pass\n\n\nclass MLP:\n    def construct(self, x):\n        return x\n")
    lines = ["# Total params: %d" % len(loads)]
    lines += ["%%para%d_%s: <Ref[Tensor[Float32]], (4, 4), ref_key=%s, is_parameter>  :  has_default" % (i + 1, p, p)
              for i, (p, _scope) in enumerate(loads)]
    lines += ["subgraph @kernel_graph0() {"]
    for i, (_p, scope) in enumerate(loads):
        lines += ["  %%%d(CNode_%d) = Load(%%para%d_Parameter_%d, UMonad[U])" % (i, i, i + 1, 60 + i),
                  "      : (<Ref[Tensor[Float32]], (4, 4)>, <UMonad, NoShape>) -> (<Tensor[Float32], (4, 4)>)",
                  "      # Fullname with scope: (%s)" % scope]
    lines += _node(len(loads), "Erf", "Default/Erf-op0", ("%s:6~7, 4~8/    def construct(self, x):/" % source,
                                                          F_DENSE))
    lines += ["}"]
    path = tmp_path / "jit.ir"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_jit_cells_graph_is_rooted_at_its_path_from_the_parameter_names(tmp_path):
    # the jitted cell's scopes start at it (Default/fc1-Linear): the parameters it loads give its model path
    ir = _jit_ir(tmp_path, [("net.blocks.1.mlp.fc1.weight", "Default/fc1-Linear/Load-op0"),
                            ("net.blocks.1.mlp.fc2.bias", "Default/fc2-Linear/Load-op1"),
                            ("net.blocks.1.mlp.scale", "Default/Load-op2")])
    assert graph_root(ir) == [("net", ""), ("blocks", ""), ("1", ""), ("mlp", "MLP")]
    # a kernel's cells (its record's parent: graph_records.kernel_parent) start with that path
    kernel = Kernel("MatMul", "Default/fc1-Linear/Expand/_Dense/MatMul-op0", 0, root=graph_root(ir))
    assert kernel.cells() == graph_root(ir) + [("fc1", "Linear")]
    assert Kernel("Erf", "Default/Erf-op0", 0, root=graph_root(ir)).cells()[-1] == ("mlp", "MLP")


def test_a_whole_model_graph_or_an_update_has_no_root(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # GRAPH_MODE: the scopes start at the model's root, the names agree with them
    whole = _jit_ir(tmp_path / "a", [("net.blocks.0.ln1.weight", NET + "/blocks-CellList/0-Block/ln1-LayerNorm/L")])
    assert graph_root(whole) == []
    # an optimizer's update loads every parameter at its top: no one path
    update = _jit_ir(tmp_path / "b", [("net.blocks.0.ln1.weight", "Default/Load-op0"),
                                      ("net.head.weight", "Default/Load-op1")])
    assert graph_root(update) == []
