"""What an open checks before it adopts a bucket's newest metadata and its cleanup deletes what that does not name:
an older metadata version put back (a partial restore) or found alone (an object store's listing that missed the
newest) would have it delete the newer data files that hold every batch since (docs/kv_store.md, "Recovery")."""

from __future__ import annotations

from .catalog import Catalog, Meta
from .datafile import DataFile
from .errors import CorruptStoreError
from .settings import StoreSettings


def refuse_missing_data_files(catalog: Catalog, meta: Meta) -> list[str]:
    """Before the open adopts ``meta`` and deletes what it does not name: every data file it names is there. An older
    metadata version put back (a partial restore, an object store's listing that missed the newest) names files
    a later flush replaced, and its cleanup deleted the newer files holding every batch since, before the first
    read found the old ones missing. The listing is the cleanup's too: one per open, as before."""
    names = catalog.names("data")
    missing = sorted({f["name"] for f in meta.files} - set(names))
    if missing:
        raise CorruptStoreError(
            catalog.path("data", missing[0]),
            f"the data file is missing, one of {len(missing)} that metadata {meta.name} names (the open deleted "
            "nothing: an older metadata version put back would have its cleanup delete the newer data files)",
        )
    return names


def refuse_later_data_files(store: StoreSettings, catalog: Catalog, meta: Meta, batch_id: int,
                            data_names: list[str]) -> None:
    """Before the cleanup deletes the data files of ``data_names`` that ``meta`` does not name: none holds a batch
    after ``batch_id``, the last the metadata and its log give. A crashed flush's or compaction's files hold
    committed batches only, still in the log; a later one's are a newer metadata version's: ``meta`` is an older
    version put back (or found alone), whose cleanup deleted them, and the bucket opened at its batch without an
    error. Files of earlier releases, and files cut short, do not say: they are deleted as before."""
    for name in catalog.unnamed_data(meta, data_names):
        path = catalog.path("data", name)
        try:
            held = DataFile(store.fs, path, store.fs.size(path), store.cache).index().batch
        except (CorruptStoreError, OSError, ValueError):
            continue  # a half-written file: a crashed flush's
        if held is not None and held > batch_id:
            raise CorruptStoreError(
                path, f"the data file holds batch {held}, after batch {batch_id}, the last that metadata "
                      f"{meta.name} and its log give: that metadata is an older version put back, or found alone "
                      "(the open deleted nothing); restore the newest metadata")

