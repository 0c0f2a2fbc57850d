"""The scheduler's pure decision core: snapshot -> session -> actions -> decisions (no I/O here).

The live loop (`shell/loop.py`) and `kai simulate` both call `operators.scheduler.decide.cycle.run_cycle`.
"""
