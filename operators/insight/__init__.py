"""`kai why`, `kai what-if`, `kai queues`, `kai top`: answers computed by the scheduler's own decision core.

Every module here except `shell` is a pure function of a snapshot (no I/O); `shell` reads the cluster.
"""
