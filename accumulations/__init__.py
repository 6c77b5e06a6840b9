"""Accumulations: the business logic that folds a window's elements into a value."""

from .base import Accumulation, MergeAccumulation
from .builtins import BottomN, Count, Distinct, Max, Mean, Min, Sum, ToList, TopN, ToSet
from .two_streams import Cogroup, InnerJoin
from .user_functions import Fold, Reduce

__all__ = ["Accumulation", "MergeAccumulation", "Sum", "Count", "Min", "Max", "Mean", "ToList",
           "ToSet", "TopN", "BottomN", "Distinct", "Fold", "Reduce", "InnerJoin", "Cogroup"]
