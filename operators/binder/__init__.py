"""The binder: turns BindRequests into bound pods. `gpusharing` and `reservation` are its pure GPU-sharing
bookkeeping; the Kopf handlers and API calls live in `handlers.py` / `binding.py`."""
