"""Per-program additions to the synthetic GPU fixtures: `augment/<program>.py` defines
`augment(data: dict) -> None`, which adds what the program writes only on CUDA (e.g. allocator
peaks) to a fixture made from its CPU result. Programs without such fields need no module."""
