"""The project and other runtimes: exports to CTranslate2 and to transformers, and Marian models of
transformers imported into ``model.Transformer``.

Sits on top of the project: model/ and data/ never import it.
"""
