"""What every schedule template shares: the GPU limits (``limits``), the rule contract
(``rule``), TIR matching helpers (``tir_match``), the allocation probe (``probe``), launch bounds
(``launch_bounds``), vector-lane analysis (``vector_lanes``) and TVM's schedule primitives without
their Python argument checks while a rule schedules (``unchecked``)."""
