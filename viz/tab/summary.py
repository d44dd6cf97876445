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


def json_summary(tag: str, data: dict) -> summary_pb2.Summary:
    """A JSON object under ``tag``, as a scalar string tensor; NaN and infinite numbers as null."""
    text = json.dumps(_null_if_not_finite(data), ensure_ascii=False, allow_nan=False).encode("utf-8")
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING,
                                    tensor_shape=tensor_shape_pb2.TensorShapeProto(), string_val=[text])
    value = summary_pb2.Summary.Value(tag=tag, metadata=create_metadata(), tensor=tensor)
    return summary_pb2.Summary(value=[value])


def _null_if_not_finite(data):
    """``data`` with every NaN or infinite float replaced by None: JSON has no such numbers (the tab's
    ``JSON.parse`` would refuse Python's ``NaN``), and null is what JavaScript's ``JSON.stringify`` writes."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {key: _null_if_not_finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_null_if_not_finite(value) for value in data]
    return data
