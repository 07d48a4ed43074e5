"""The op-type vocabulary shared by every graph front end (design.md section 2, field `op_type`).

A CompGraph stores one small integer per op; policies embed it, heuristics may key on it. All
front ends (synthetic generators, the PipeDream and Piper importers, the XLA HLO front end) map
their own op names onto this one generic vocabulary so that a policy trained on graphs of one
source sees the same ids on another.

Ids are stable: `OP_TYPES` may only grow at its end (never reorder or remove a name), so graphs
saved to .npz keep their meaning. Backward (gradient) ops reuse the name of their forward op with
a flag: id = forward id + `BACKWARD_OFFSET`. The offset is a fixed capacity rather than
`len(OP_TYPES)` so that appending a forward name never shifts a backward id. Embedding tables
should have `NUM_OP_TYPES` rows.
"""

from __future__ import annotations

import re

import numpy as np

# Generic op types, in id order. Append only.
OP_TYPES = (
    "unknown",      # 0: anything not mapped below
    "input",        # graph inputs, data loading
    "parameter",    # weights read as an op (HLO parameter, variable read)
    "constant",     # constants and shape/metadata queries
    "conv",         # convolutions (any rank, transposed too)
    "dot",          # matrix multiplication, fully connected layers
    "elementwise",  # add, mul, dropout, casts and other pointwise arithmetic
    "reduce",       # reductions (sum, mean, max over axes)
    "norm",         # batch/layer/group normalization
    "activation",   # relu, gelu, sigmoid, tanh, ...
    "pool",         # max/avg pooling
    "concat",       # concatenation
    "reshape",      # reshape, view, flatten, squeeze
    "embedding",    # table lookups
    "lstm",         # recurrent cells (LSTM, GRU, RNN)
    "attention",    # attention blocks, transformer layers
    "softmax",      # softmax, log-softmax
    "loss",         # loss functions
    "optimizer",    # parameter update ops
    "fusion",       # a fused group of ops (XLA fusion)
    "while",        # loops
    "conditional",  # branches
    "custom_call",  # opaque library calls (cuDNN, cuBLAS custom calls)
    "collective",   # all-reduce, all-gather, reduce-scatter, all-to-all
    "copy",         # copies, identity, device transfers
    "slice",        # slicing, tuple element selection (getitem)
    "transpose",    # transposes and permutations
    "broadcast",    # broadcasts
    "gather",       # gathers and dynamic slices
    "scatter",      # scatters and dynamic update slices
    "pad",          # padding
    "rng",          # random number generation
    "sort",         # sorts and top-k
)

# Fixed capacity for forward names; backward ids live in [BACKWARD_OFFSET, 2 * BACKWARD_OFFSET).
BACKWARD_OFFSET = 64
NUM_OP_TYPES = 2 * BACKWARD_OFFSET
assert len(OP_TYPES) <= BACKWARD_OFFSET, "op vocabulary outgrew BACKWARD_OFFSET"

OP_TYPE_IDS = {name: i for i, name in enumerate(OP_TYPES)}

# Accepted spellings that map onto a canonical name.
ALIASES = {"matmul": "dot", "dense": "dot", "linear": "dot", "batchnorm": "norm",
           "layernorm": "norm", "recurrent": "lstm", "rnn": "lstm", "identity": "copy"}


def op_type_id(name: str, backward: bool = False) -> int:
  """Id of a vocabulary name (or alias); `backward=True` gives the gradient variant's id.

  Raises:
    ValueError: `name` is neither in `OP_TYPES` nor in `ALIASES`.
  """
  key = ALIASES.get(name, name)
  if key not in OP_TYPE_IDS:
    raise ValueError(f"unknown op type {name!r}; valid names: {', '.join(OP_TYPES)} "
                     f"(aliases: {', '.join(sorted(ALIASES))})")
  return OP_TYPE_IDS[key] + (BACKWARD_OFFSET if backward else 0)


def op_type_name(type_id: int) -> str:
  """Inverse of `op_type_id`: 'conv' or, for a backward id, 'conv/bwd'."""
  tid = int(type_id)
  base, bwd = (tid - BACKWARD_OFFSET, True) if tid >= BACKWARD_OFFSET else (tid, False)
  if not 0 <= base < len(OP_TYPES):
    raise ValueError(f"op type id {type_id} is not in the vocabulary "
                     f"(forward ids 0..{len(OP_TYPES) - 1}, backward ids +{BACKWARD_OFFSET})")
  return OP_TYPES[base] + ("/bwd" if bwd else "")


def is_backward(type_ids) -> np.ndarray:
  """Boolean mask: which ids denote backward (gradient) ops."""
  return np.asarray(type_ids) >= BACKWARD_OFFSET


def forward_type(type_ids) -> np.ndarray:
  """The forward id of each id (backward flag removed)."""
  ids = np.asarray(type_ids)
  return np.where(ids >= BACKWARD_OFFSET, ids - BACKWARD_OFFSET, ids)


# PyTorch module class name (lower case, as in `repr(module)` up to the first '(') -> op type.
# Composite modules (e.g. GNMT's RecurrentAttention, BERT's transformer layer) map to their
# dominant op.
_TORCH_MODULES = {
    "input": "input", "hidden": "input", "tensor": "input",
    "conv1d": "conv", "conv2d": "conv", "conv3d": "conv", "convtranspose1d": "conv",
    "convtranspose2d": "conv", "convtranspose3d": "conv",
    "linear": "dot", "bilinear": "dot", "classifier": "dot", "matmul": "dot", "bmm": "dot",
    "batchnorm1d": "norm", "batchnorm2d": "norm", "batchnorm3d": "norm", "layernorm": "norm",
    "groupnorm": "norm", "instancenorm2d": "norm", "localresponsenorm": "norm",
    "fusedlayernorm": "norm",
    "relu": "activation", "relu6": "activation", "leakyrelu": "activation", "prelu": "activation",
    "elu": "activation", "selu": "activation", "gelu": "activation", "silu": "activation",
    "sigmoid": "activation", "tanh": "activation", "hardtanh": "activation",
    "softplus": "activation", "hardswish": "activation", "hardsigmoid": "activation",
    "maxpool1d": "pool", "maxpool2d": "pool", "maxpool3d": "pool", "avgpool1d": "pool",
    "avgpool2d": "pool", "avgpool3d": "pool", "adaptiveavgpool1d": "pool",
    "adaptiveavgpool2d": "pool", "adaptivemaxpool2d": "pool",
    "add": "elementwise", "sub": "elementwise", "mul": "elementwise", "div": "elementwise",
    "dropout": "elementwise", "dropout2d": "elementwise", "alphadropout": "elementwise",
    "concat": "concat", "cat": "concat", "stack": "concat",
    "view": "reshape", "reshape": "reshape", "flatten": "reshape", "squeeze": "reshape",
    "unsqueeze": "reshape", "contiguous": "copy", "identity": "copy",
    "transpose": "transpose", "permute": "transpose",
    "__getitem__": "slice", "narrow": "slice", "chunk": "slice", "split": "slice",
    "size": "constant",
    "embedding": "embedding", "embeddingbag": "embedding",
    "lstm": "lstm", "gru": "lstm", "rnn": "lstm", "lstmcell": "lstm", "grucell": "lstm",
    "emubidirlstm": "lstm",
    "recurrentattention": "attention", "bahdanauattention": "attention",
    "multiheadattention": "attention", "paralleltransformerlayer": "attention",
    "transformerencoderlayer": "attention", "transformerdecoderlayer": "attention",
    "softmax": "softmax", "logsoftmax": "softmax",
    "crossentropyloss": "loss", "nllloss": "loss", "mseloss": "loss", "l1loss": "loss",
    "bceloss": "loss", "bcewithlogitsloss": "loss", "labelsmoothing": "loss",
    "zeropad2d": "pad", "constantpad2d": "pad", "reflectionpad2d": "pad",
    "replicationpad2d": "pad",
    "sum": "reduce", "mean": "reduce",
}

_LEADING_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)")


def torch_module_type(module_repr: str) -> int:
  """Op type id of a PyTorch module repr as written by the PipeDream profiler.

  Looks at the class name before the first '(' ("Conv2d(64, 64, ...)" -> conv,
  "ReLU(inplace)" -> activation, "Input0" -> input). Never raises: anything unrecognized maps
  to "unknown".
  """
  m = _LEADING_NAME.match(str(module_repr))
  if not m:
    return OP_TYPE_IDS["unknown"]
  name = m.group(1).lower()
  if name not in _TORCH_MODULES:
    # "Input0", "Input1" (several graph inputs) and similar numbered names.
    name = name.rstrip("0123456789")
  return OP_TYPE_IDS[_TORCH_MODULES.get(name, "unknown")]
