"""The scheduler's pure decision core: snapshot -> session -> actions -> decisions (no I/O here).

The live loop (loop.py) and `kai simulate` both call `operators.scheduler.cycle.run_cycle`.
"""
