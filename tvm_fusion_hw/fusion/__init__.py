"""The fusion layer: the dataflow graph and its costs, the policy and its rules, the partition,
the pass that replaces ``relax.transform.FuseOps``, its decisions, and dead-block removal after
FuseTIR. Reads the hardware layer; learns what the schedule templates plan only through
:mod:`tvm_fusion_hw.plans`, never by importing a template."""
