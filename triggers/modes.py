"""Accumulation modes: what a window's state becomes after a pane fires."""

from enum import Enum


class AccumulationMode(Enum):
    DISCARDING = "discarding"
    """Each pane holds only the elements since the previous pane."""
    ACCUMULATING = "accumulating"
    """Each pane holds every element of the window so far."""
    ACCUMULATING_AND_RETRACTING = "accumulating_and_retracting"
    """As ACCUMULATING; a changed pane is preceded by a retraction of the previous one."""
