"""Data transforms and dataset checks that the host libraries lack or get wrong.

Modules here are imported (and so registered) by `peco_mm.registry`, each only when the
libraries it needs are installed; this file imports nothing so that it never pulls them in.
"""
