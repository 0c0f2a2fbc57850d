"""The scheduler component: `decide/` is the pure decision core (snapshot -> session -> actions -> decisions, no I/O),
`shell/` is its I/O (the cycle loop, the writer, the entry point, the shard watcher, `kai snapshot`/`kai simulate`).
"""
