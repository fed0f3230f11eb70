"""GraphSAGE / GAT models and the training entry point (``ibp_graph.train``).

``config`` (the YAML run config), ``models`` (PyG and DGL models), ``backends`` (what differs
between PyG and DGL: graph, loader, forward pass) and ``run`` (`train`, one loop for both).
"""
