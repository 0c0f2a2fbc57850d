"""The scheduler's I/O: informers -> snapshot -> `decide` -> BindRequests, evictions, status; and the commands."""
