"""The binder: turns BindRequests into bound pods. `gpusharing` and `reservation` are its pure GPU-sharing
bookkeeping; the informers, work queues and API calls live in `binding.py`, the process wiring in `main.py`."""
