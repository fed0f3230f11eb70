"""GraphSAGE / GAT models and the training entry point (``ibp_graph.train``)."""
