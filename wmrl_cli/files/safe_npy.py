"""Reading `.npy` files that hold pickled object arrays without letting the pickle run code.

`numpy.load(allow_pickle=True)` lets a file import and call anything (for example
`os.system`). Here the pickle stream goes through an unpickler that resolves only the few
numpy globals needed to rebuild arrays; dicts, lists, strings, bytes and numbers need no
globals at all. Anything else is refused with `UnsafeFileError`.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.errors import UnsafeFileError, WmrlError

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    # Protocol-2 pickles encode bytes as _codecs.encode(str, 'latin1'): pure, no side effects.
    ("_codecs", "encode"),
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused global '{module}.{name}'")


def _check_tree(value: Any, path: Path) -> Any:
    """Only arrays, dicts, lists, tuples, strings, bytes, numbers, bools and None."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            for item in value.flat:
                _check_tree(item, path)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_tree(key, path)
            _check_tree(item, path)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_tree(item, path)
    elif not isinstance(value, (str, bytes, int, float, complex, bool, np.generic, type(None))):
        raise UnsafeFileError(f"{path}: holds a {type(value).__name__}, not plain data")
    return value


def load_npy(path: str | Path) -> np.ndarray:
    """Load a `.npy` file; object arrays are unpickled through the restricted unpickler."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
            if not dtype.hasobject:
                handle.seek(0)
                return np.load(handle, allow_pickle=False)
            try:
                array = _RestrictedUnpickler(handle).load()
            except pickle.UnpicklingError as exc:
                raise UnsafeFileError(f"{path}: unsafe pickle refused ({exc})") from None
            except (EOFError, ValueError, TypeError, AttributeError) as exc:
                raise WmrlError(f"{path}: corrupt object array ({exc})") from None
    except OSError as exc:
        raise WmrlError(f"{path}: cannot read ({exc})") from None
    except ValueError as exc:
        raise WmrlError(f"{path}: not a .npy file ({exc})") from None
    if not isinstance(array, np.ndarray):
        raise UnsafeFileError(f"{path}: pickle holds a {type(array).__name__}, not an array")
    if tuple(array.shape) != tuple(shape):
        raise WmrlError(f"{path}: array shape {array.shape} does not match header {shape}")
    return _check_tree(array, path)
