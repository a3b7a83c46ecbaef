"""The value codec: typed Python values to JSON text and back, strictly.

Layer: the codec, just above :mod:`tether._errors`. It imports nothing else of
tether's; every layer above encodes and decodes through it. Its modules:
``_values`` (the codec object and signatures), ``_converter`` (one strict
``cattrs`` converter), ``_json`` (canonical JSON text and digests), ``_types``
(standard-library types JSON has no form of), ``_registry`` (users' types) and
``_check`` (the round-trip comparison and its error text).
"""
