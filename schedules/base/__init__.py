"""What every schedule template shares: the GPU limits (``limits``), the rule contract
(``rule``), TIR matching helpers (``tir_match``), the allocation probe (``probe``), launch bounds
(``launch_bounds``) and vector-lane analysis (``vector_lanes``)."""
