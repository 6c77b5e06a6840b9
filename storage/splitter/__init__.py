"""The file splitter and block readers (issue 5): discover files, cut them into blocks, read records.

Importing this package does not import pyspark; the Spark source loads it on use.
"""

from storage.splitter.config import SplitterConfig
from storage.splitter.metadata import BlockMetadata, FileMetadata
from storage.splitter.readers import SkippedBlock, UnreadableFileWarning, read_block_table, read_csv_block, read_lines
from storage.splitter.scanner import UnsettledFileWarning
from storage.splitter.splitter import FileSplitter

__all__ = [
    "BlockMetadata",
    "FileMetadata",
    "FileSplitter",
    "SkippedBlock",
    "SplitterConfig",
    "UnreadableFileWarning",
    "UnsettledFileWarning",
    "read_block_table",
    "read_csv_block",
    "read_lines",
]
