"""The one error a webhook handler raises on purpose: the body is JSON but not an AdmissionReview request.

Pure (no I/O imports), so that the pure admission rules can raise it and the HTTPS shell can answer it with
HTTP 400 rather than as an internal error.
"""

from __future__ import annotations


class BadReview(ValueError):
    """The body is not an AdmissionReview request: answered with HTTP 400."""
