"""(layer docstring to write)"""
