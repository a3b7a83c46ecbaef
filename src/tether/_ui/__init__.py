"""The dashboard: a Starlette app over one engine, served by Hypercorn in trio.

Layer: the dashboard, near the top. Only the command line (``tether ui``) imports
it; nothing below it does. It reads and acts on runs through the engine's
public methods.
"""
