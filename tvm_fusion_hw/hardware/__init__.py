"""The hardware layer: what a GPU has (profiles), the TVM target that carries it, the occupancy a
kernel gets on it, and the toolchains that build for it. Imports nothing else of the plugin."""
