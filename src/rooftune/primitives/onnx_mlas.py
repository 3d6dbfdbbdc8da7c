"""ONNX Runtime's MLAS convolution: a one-node ONNX model (Conv, weights as initializers) in an
InferenceSession on the CPU provider, inputs and outputs bound in place (I/O binding on the
torch tensors' memory, no copies)."""

from __future__ import annotations

import numpy as np
import torch

from rooftune.primitives.base import Kernel, Primitive
from rooftune.primitives.spec import ConvSpec


class OnnxRuntimeMLAS(Primitive):
    name = "onnxruntime-mlas"
    library = "ONNX Runtime (MLAS)"
    thread_pool = "onnxruntime"
    description = "one-node ONNX Conv in an InferenceSession, I/O binding"

    def available(self) -> str | None:
        import importlib.util

        for pkg in ("onnxruntime", "onnx"):
            if importlib.util.find_spec(pkg) is None:
                return f"{pkg} is not installed (pip install {pkg})"
        return None

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        inits = [numpy_helper.from_array(weight.detach().numpy().astype(np.float32), "w")]
        names = ["x", "w"]
        if bias is not None:
            inits.append(numpy_helper.from_array(bias.detach().numpy().astype(np.float32), "b"))
            names.append("b")
        node = helper.make_node("Conv", names, ["y"], kernel_shape=[spec.R, spec.S], strides=list(spec.stride),
                                pads=[spec.padding[0], spec.padding[1], spec.padding[0], spec.padding[1]],
                                dilations=list(spec.dilation), group=spec.groups)
        graph = helper.make_graph([node], "conv",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(spec.input_shape))],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(spec.output_shape))],
                                  initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = min(model.ir_version, 9)
        so = ort.SessionOptions()
        so.intra_op_num_threads = torch.get_num_threads()  # the campaign's thread count
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # spinning off: idle MLAS threads spinning after a call would take cores from whatever
        # the campaign times next
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        out_shape = list(spec.output_shape)

        def run(x: torch.Tensor) -> torch.Tensor:
            x = x.contiguous()
            y = torch.empty(out_shape)
            io = sess.io_binding()
            io.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.data_ptr())
            io.bind_output("y", "cpu", 0, np.float32, out_shape, y.data_ptr())
            sess.run_with_iobinding(io)
            return y

        return Kernel(spec, run)
