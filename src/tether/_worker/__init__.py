"""Workers and schedules: runs claimed from the store's queue, and runs started by the clock.

Layer: workers, above the engine, whose internal interface
(:func:`tether._engine._engine.internals`) they use. Nothing below imports
them; the testing toolkit, the dashboard and the command line above may.
"""
