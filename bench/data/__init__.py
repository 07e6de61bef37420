"""Loaders for the studies' real data sets (validated, with clear one-line errors), and their download.

mnist, sgemm, ag_news, cifar10: one loader each; each looks in an explicit path, then ``.data/<name>``,
then ``../shared/data/<name>``. fetch: ``python -m bench.data.fetch <name>`` downloads a data set from its
canonical location into ``.data/<name>``, checksums verified. common: the shared errors and search order.
"""
