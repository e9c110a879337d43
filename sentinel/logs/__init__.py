"""Crash signatures in logs: load the signature file, classify lines into `LogEvent`s.

    signatures = load_signature_file("rules/signatures.yaml")   # SignatureSet
    classifier = Classifier(signatures)                           # one per log stream
    events = classifier.feed_many(source.poll(now_ms))            # or feed(entry)
    events += classifier.flush()                                  # at end of stream
"""

from sentinel.logs.classify import Classifier, ClassifierStats
from sentinel.logs.signatures import (
    CATEGORIES,
    Signature,
    SignatureFileError,
    SignatureSet,
    load_signature_file,
    parse_signatures,
)

__all__ = [
    "CATEGORIES", "Classifier", "ClassifierStats", "Signature", "SignatureFileError",
    "SignatureSet", "load_signature_file", "parse_signatures",
]
