"""The string form of a Kubernetes label selector (`a=b,c!=d,e,!f,g in (h,i),j notin (k)`), as the
`labelSelector` argument of KAI's plugins takes it."""

from __future__ import annotations

import re

from operators.scheduler.decide.records import LabelSelector, Requirement

_SET = re.compile(r"^\s*(!?[^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*")
_TERM = re.compile(r"^\s*(!?)([^\s!=(),]+)\s*(?:(==|=|!=)\s*([^\s,()]*))?\s*")


def parse_selector(text: str) -> LabelSelector:
    """The selector, or ValueError naming what cannot be parsed. An empty text selects every pod."""
    reqs: list[Requirement] = []
    rest = text.strip()
    while rest:
        m = _SET.match(rest)
        if m is not None:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), "In" if m.group(2) == "in" else "NotIn", values))
        else:
            m = _TERM.match(rest)
            if m is None or not m.group(2):
                raise ValueError(f"label selector {text!r}: cannot parse {rest!r}")
            negated, key, op, value = m.group(1), m.group(2), m.group(3), m.group(4)
            if op is None:
                reqs.append(Requirement(key, "DoesNotExist" if negated else "Exists"))
            elif negated:
                raise ValueError(f"label selector {text!r}: '!' goes only before a bare key")
            else:
                reqs.append(Requirement(key, "NotIn" if op == "!=" else "In", (value or "",)))
        rest = rest[m.end():]
        if rest.startswith(","):
            rest = rest[1:]
        elif rest:
            raise ValueError(f"label selector {text!r}: expected ',' before {rest!r}")
    return LabelSelector(tuple(reqs))
