"""Placing the kernels MindSpore expands inline (``Expand/_Dense/MatMul-op0``: no cell) under their cell from the
graph's IR dump, and file scopes the execution order lists under another number (no MindSpore needed: the IR and
names are written here in the form MindSpore 2.10 writes them)."""

from engines.adapters.mindspore.graph_kernels import scope_name
from engines.adapters.mindspore.graph_scopes import expanded_scopes, read_ir

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
