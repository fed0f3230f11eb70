"""Framework plugins: ``ibp_graph.loaders.pyg`` and ``ibp_graph.loaders.dgl``."""
