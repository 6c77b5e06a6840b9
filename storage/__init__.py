"""Window-state storage, the key-value store, the file sink and the file splitter."""

from typing import Any

__all__ = ["FileSink", "FileSplitter", "KVStore"]  # `from storage import *` reads them through __getattr__


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


def __getattr__(name: str) -> Any:
    # Lazy, so `import storage` stays cheap and never pulls in pyarrow or pyspark.
    if name == "FileSink":
        from .file_sink import FileSink

        return FileSink
    if name == "KVStore":
        from .kv import KVStore

        return KVStore
    if name == "FileSplitter":
        from .splitter import FileSplitter

        return FileSplitter
    raise AttributeError(f"module 'storage' has no attribute {name!r}")
