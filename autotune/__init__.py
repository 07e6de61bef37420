"""Autotuning as a tool: declared config spaces (spaces.py), sweeps that record every trial (sweep.py), the
recorded landscapes (landscape.py) and a learned cost model that prunes the search (cost_model.py).

Nothing is imported here: the compile workers of a sweep import this package in fresh processes and must
stay light. Every module that imports triton imports ``triton_kernels`` first (the interpreter switch)."""
