"""Exports of trained models to other runtimes.

Sits on top of the project: model/ and data/ never import it.
"""
