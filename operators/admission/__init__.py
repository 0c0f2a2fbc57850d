"""The admission webhook: pure mutation and validation of pods (mutate, validate, review); the aiohttp
server shell lives in `server.py`."""

from operators.admission.mutate import AdmissionDenied, make_random_suffix, mutate_pod
from operators.admission.review import ReviewError, mutate_review, validate_review
from operators.admission.validate import validate_pod

__all__ = [
    "AdmissionDenied",
    "ReviewError",
    "make_random_suffix",
    "mutate_pod",
    "mutate_review",
    "validate_pod",
    "validate_review",
]
