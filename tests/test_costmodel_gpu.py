"""The cost model on XLA:GPU modules, tested on CPU: the HLO below is what jax 0.11.2 printed on
an H100 (XLA_FLAGS=--xla_gpu_enable_triton_gemm=false; backend_configs shortened), so no GPU is
needed. cuBLAS / cuDNN custom-calls are costed as the dots / convolutions they compute
(`opclass.gpu_library_call`), and no page faults are charged off XLA:CPU
(`microbench.fresh_bytes`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simulator.costmodel import microbench, timing
from simulator.costmodel import opclass as feat

pytestmark = pytest.mark.fast_compile

GPU_HLO = r"""HloModule jit_f, is_scheduled=true

%wrapped_transpose_computation (param_0: f32[3,3,24,24]) -> f32[24,3,3,24] {
  %param_0 = f32[3,3,24,24]{3,2,1,0} parameter(0)
  ROOT %transpose.1 = f32[24,3,3,24]{3,2,1,0} transpose(%param_0), dimensions={3,0,1,2}
}

ENTRY %main.1 (a.1: f32[320,320], b.1: f32[320,320], s.1: f32[16,320], x.1: f32[8,28,28,24], w.1: f32[3,3,24,24], g.1: f32[24,3,3,1]) -> (f32[320,320], f32[16,320], f32[8,28,28,24], f32[24,3,3,24], f32[8,28,28,24], f32[8,28,28,24]) {
  %a.1 = f32[320,320]{1,0} parameter(0)
  %b.1 = f32[320,320]{1,0} parameter(1)
  %s.1 = f32[16,320]{1,0} parameter(2)
  %x.1 = f32[8,28,28,24]{3,2,1,0} parameter(3)
  %w.1 = f32[3,3,24,24]{3,2,1,0} parameter(4)
  %g.1 = f32[24,3,3,1]{3,2,1,0} parameter(5)
  %custom-call.1 = (f32[320,320]{1,0}, s8[33554432]{0}) custom-call(%a.1, %b.1), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"alpha_real":1,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"epilogue":"DEFAULT"}}
  %gemm = f32[320,320]{1,0} get-tuple-element(%custom-call.1), index=0
  %custom-call.2 = (f32[16,320]{1,0}, s8[33554432]{0}) custom-call(%s.1, %b.1), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %skinny = f32[16,320]{1,0} get-tuple-element(%custom-call.2), index=0
  %wrapped_transpose = f32[24,3,3,24]{3,2,1,0} fusion(%w.1), kind=kInput, calls=%wrapped_transpose_computation
  %cudnn-conv.1 = (f32[8,28,28,24]{3,2,1,0}, u8[0]{0}) custom-call(%x.1, %wrapped_transpose), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convForward", backend_config={"cudnn_conv_backend_config":{"activation_mode":"kNone"}}
  %y = f32[8,28,28,24]{3,2,1,0} get-tuple-element(%cudnn-conv.1), index=0
  %cudnn-conv-bw-filter.1 = (f32[24,3,3,24]{3,2,1,0}, u8[0]{0}) custom-call(%x.1, %y), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convBackwardFilter", backend_config={}
  %dw = f32[24,3,3,24]{3,2,1,0} get-tuple-element(%cudnn-conv-bw-filter.1), index=0
  %cudnn-conv-bw-input.1 = (f32[8,28,28,24]{3,2,1,0}, u8[0]{0}) custom-call(%y, %wrapped_transpose), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convBackwardInput", backend_config={}
  %dx = f32[8,28,28,24]{3,2,1,0} get-tuple-element(%cudnn-conv-bw-input.1), index=0
  %cudnn-conv.2 = (f32[8,28,28,24]{3,2,1,0}, u8[0]{0}) custom-call(%x.1, %g.1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_o01i->b01f, feature_group_count=24, custom_call_target="__cudnn$convForward", backend_config={}
  %dwise = f32[8,28,28,24]{3,2,1,0} get-tuple-element(%cudnn-conv.2), index=0
  ROOT %tuple = (f32[320,320]{1,0}, f32[16,320]{1,0}, f32[8,28,28,24]{3,2,1,0}, f32[24,3,3,24]{3,2,1,0}, f32[8,28,28,24]{3,2,1,0}, f32[8,28,28,24]{3,2,1,0}) tuple(%gemm, %skinny, %y, %dw, %dx, %dwise)
}
"""


def test_library_calls_get_the_class_and_flops_of_their_dot_or_conv():
  h = feat.hlo_graph(GPU_HLO, "gpu")
  leaves = feat.hlo_features(h)
  rows = {name: (feat.OP_CLASSES[c], f, b, feat.NODE_DTYPES[d]) for name, c, f, b, d in zip(
      h.inst_names, leaves.op_class, leaves.flops, leaves.bytes, leaves.dtype)}
  conv_out = 8 * 28 * 28 * 24
  assert rows["custom-call.1"] == ("dot", 2.0 * 320 ** 3, 3 * 320 * 320 * 4.0, "f32")  # no s8
  assert rows["custom-call.2"][:2] == ("dot_small", 2.0 * 16 * 320 * 320)  # M = 16 < 64
  assert rows["cudnn-conv.1"][:2] == ("conv", 2.0 * conv_out * 9 * 24)
  assert rows["cudnn-conv-bw-filter.1"][:2] == ("conv_filter", 2.0 * conv_out * 9 * 24)
  assert rows["cudnn-conv-bw-input.1"][:2] == ("conv", 2.0 * conv_out * 9 * 24)
  assert rows["cudnn-conv.2"][:2] == ("conv_grouped", 2.0 * conv_out * 9)  # depthwise
  assert rows["wrapped_transpose"][0] == "transpose"


def test_other_custom_calls_and_instructions_are_left_alone():
  h = feat.hlo_graph(GPU_HLO, "gpu")
  mod = feat._Module(feat.strip_comments(GPU_HLO))  # pylint: disable=protected-access
  insts = {i.name: i for i in mod.comps[mod.entry]}
  assert feat.gpu_library_call(insts["wrapped_transpose"], mod.by_name[mod.entry]) is None
  other = GPU_HLO.replace("__cublas$lt$matmul", "my_kernel")
  leaves = feat.hlo_features(feat.hlo_graph(other, "other"))
  assert feat.OP_CLASSES[leaves.op_class[list(h.inst_names).index("custom-call.1")]] == \
      "custom_call"


def test_no_page_faults_are_charged_off_xla_cpu(monkeypatch):
  exe = jax.jit(lambda x: x * 1.5 + 0.5).lower(jnp.ones(9_000_000, jnp.float32)).compile()
  text = exe.as_text()
  assert microbench.executable_platform(exe) == "cpu"
  assert microbench.fresh_bytes(exe, text) == pytest.approx(36e6)  # the output is >= 32 MiB
  monkeypatch.setattr(timing, "executable_platform", lambda e: "gpu")
  assert microbench.fresh_bytes(exe, text) == 0.0
  assert np.isfinite(microbench.fresh_bytes(exe, text))
