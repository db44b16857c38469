"""Plain values across a process boundary, as tagged JSON.

Only built-in data types cross: None, bool, int, float, complex, str,
bytes, list, tuple, dict, set, frozenset, each checked with `type(x) is`,
so a subclass (an int whose __eq__ always says True) cannot cross. The
decoder builds fresh built-in objects from JSON and nothing else, so the
process that compares results never holds an object of the candidate's.

Standard library only: it runs inside the verifier boundary.
"""

import json
import math

MAX_DEPTH = 100


class NotPlain(TypeError):
    pass


def encode(value, depth=0):
    if depth > MAX_DEPTH:
        raise NotPlain("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        # Big ints as decimal strings: JSON readers differ on huge numbers.
        return value if -(2**53) < value < 2**53 else {"i": str(value)}
    if t is float:
        return {"f": float.hex(value) if math.isfinite(value) else repr(value)}
    if t is complex:
        return {"c": [encode(value.real), encode(value.imag)]}
    if t is bytes:
        return {"b": value.hex()}
    if t is list:
        return [encode(v, depth + 1) for v in value]
    if t is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "fs": [encode(v, depth + 1) for v in value]}
    raise NotPlain(f"value of type {t.__name__} is not a plain built-in value")


def _float(text):
    if text in ("nan", "inf", "-inf"):
        return float(text)
    return float.fromhex(text)


def decode(obj, depth=0):
    if depth > MAX_DEPTH:
        raise NotPlain("value nested too deeply")
    t = type(obj)
    if obj is None or t is bool or t is str or t is int:
        return obj
    if t is list:
        return [decode(v, depth + 1) for v in obj]
    if t is dict and len(obj) == 1:
        ((tag, inner),) = obj.items()
        if tag == "i" and type(inner) is str:
            return int(inner)
        if tag == "f" and type(inner) is str:
            return _float(inner)
        if tag == "c" and type(inner) is list and len(inner) == 2:
            return complex(decode(inner[0], depth + 1), decode(inner[1], depth + 1))
        if tag == "b" and type(inner) is str:
            return bytes.fromhex(inner)
        if type(inner) is list:
            items = [decode(v, depth + 1) for v in inner]
            if tag == "t":
                return tuple(items)
            if tag == "s":
                return set(items)
            if tag == "fs":
                return frozenset(items)
            if tag == "d":
                out = {}
                for pair in items:
                    if type(pair) is not list or len(pair) != 2:
                        raise NotPlain("malformed dict entry")
                    out[pair[0]] = pair[1]
                return out
    raise NotPlain(f"not an encoded plain value: {str(obj)[:80]}")


def dumps(value):
    return json.dumps(encode(value), separators=(",", ":"), allow_nan=False)


def loads(text):
    return decode(json.loads(text))


def same(expected, actual, tolerance=None):
    """Equality for judging: numbers by value, bool apart from numbers,
    list and tuple alike (task files have only lists), floats within
    `tolerance` when given, NaN equal to NaN."""
    te, ta = type(expected), type(actual)
    if te is bool or ta is bool:
        return te is ta and expected == actual
    if te in (int, float) and ta in (int, float):
        if te is float or ta is float:
            e, a = float(expected), float(actual)
            if math.isnan(e) or math.isnan(a):
                return math.isnan(e) and math.isnan(a)
            if tolerance:
                return math.isclose(e, a, rel_tol=tolerance, abs_tol=tolerance)
            return e == a
        return expected == actual
    if te in (list, tuple) and ta in (list, tuple):
        pairs = zip(expected, actual, strict=False)  # lengths compared first
        return len(expected) == len(actual) and all(same(e, a, tolerance) for e, a in pairs)
    if te is dict and ta is dict:
        return expected.keys() == actual.keys() and all(same(v, actual[k], tolerance) for k, v in expected.items())
    if te is complex or ta is complex:
        return complex(expected) == complex(actual) if {te, ta} <= {int, float, complex} else False
    return te is ta and expected == actual
