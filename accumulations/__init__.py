"""Accumulations: the business logic that folds a window's elements into a value."""

from .base import Accumulation, MergeAccumulation
from .builtins import BottomN, Cogroup, Count, Distinct, Fold, InnerJoin, Max, Mean, Min, Reduce, Sum, ToList, TopN, ToSet

__all__ = ["Accumulation", "MergeAccumulation", "Sum", "Count", "Min", "Max", "Mean", "ToList",
           "ToSet", "TopN", "BottomN", "Distinct", "Fold", "Reduce", "InnerJoin", "Cogroup"]
