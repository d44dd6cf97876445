"""Summaries for the ATTENTION tab, as ``tensorboard`` protos a ``SummaryWriter``'s file writer can add."""

import json
import math

import numpy as np
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from viz.tab.metadata import create_metadata

_DTYPES = {np.dtype(np.float16): types_pb2.DT_HALF, np.dtype(np.float32): types_pb2.DT_FLOAT}


def _tensor_proto(array: np.ndarray) -> tensor_pb2.TensorProto:
    """Raw little-endian bytes (2 bytes a value for float16), the most compact form an event file holds."""
    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=n) for n in array.shape]
    )
    return tensor_pb2.TensorProto(
        dtype=_DTYPES[array.dtype], tensor_shape=shape, tensor_content=array.tobytes()
    )


def tensor_summary(tag: str, array: np.ndarray) -> summary_pb2.Summary:
    """One float16 or float32 array under ``tag``."""
    if array.dtype not in _DTYPES:
        raise ValueError(f"{tag}: only float16 and float32 arrays are logged, got {array.dtype}")
    value = summary_pb2.Summary.Value(tag=tag, metadata=create_metadata(), tensor=_tensor_proto(array))
    return summary_pb2.Summary(value=[value])


def _finite(value):
    """``value`` with every NaN or infinite float (a diverged run's lens) as None: JSON has no such number."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def json_summary(tag: str, data: dict) -> summary_pb2.Summary:
    """A JSON object under ``tag``, as a scalar string tensor; non-finite numbers are written as null."""
    text = json.dumps(_finite(data), ensure_ascii=False, allow_nan=False).encode("utf-8")
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING,
                                    tensor_shape=tensor_shape_pb2.TensorShapeProto(), string_val=[text])
    value = summary_pb2.Summary.Value(tag=tag, metadata=create_metadata(), tensor=tensor)
    return summary_pb2.Summary(value=[value])
