"""Register feedback: what the compiler made of each kernel (ptxas, AMDGPU metadata, launch
configuration) and the loop that splits a fused group that spilled or lost occupancy, then rebuilds
(:func:`compile_with_feedback`)."""

from .split_loop import FeedbackResult, compile_with_feedback

__all__ = ["FeedbackResult", "compile_with_feedback"]
