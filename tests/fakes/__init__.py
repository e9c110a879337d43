"""Local fakes of remote APIs (Cloud Logging, Cloud TPU), served on 127.0.0.1 for tests.

Test modules import them as `fakes.<module>`: pytest puts tests/ on sys.path.
"""
