"""The ground floor for files: atomic writes (`atomic`) and safe loading of downloaded
object arrays (`safe_npy`). Imports nothing of wmrl but `errors`."""

from wmrl_cli.files.atomic import (
    WriteError,
    atomic_dir,
    atomic_write_bytes,
    atomic_write_text,
    environment_error,
    keep_when_replaced,
    save_tensors,
    share,
    temp_file_beside,
    umask,
    write_failed,
)
from wmrl_cli.files.safe_npy import load_npy

__all__ = [
    "WriteError",
    "atomic_dir",
    "atomic_write_bytes",
    "atomic_write_text",
    "environment_error",
    "keep_when_replaced",
    "load_npy",
    "save_tensors",
    "share",
    "temp_file_beside",
    "umask",
    "write_failed",
]
