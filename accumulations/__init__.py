"""Accumulations: the business logic that folds a window's elements into a value."""

from .base import Accumulation, MergeAccumulation
from .builtins import BottomN, Count, Distinct, Fold, Max, Mean, Min, Reduce, Sum, ToList, TopN, ToSet
from .two_streams import Cogroup, InnerJoin

__all__ = ["Accumulation", "MergeAccumulation", "Sum", "Count", "Min", "Max", "Mean", "ToList",
           "ToSet", "TopN", "BottomN", "Distinct", "Fold", "Reduce", "InnerJoin", "Cogroup"]
