"""Compiling a plan's units (``build``) and running them (``executor``: hand-over, fallback, events) with the runtime
precision audit (``audit``).
"""
