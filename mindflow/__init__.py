"""mindflow: long-term memory for AI agents, run as Dagster pipelines."""

import os

# LanceDB warns on every index listing that its statistics will stop including the
# vector index's centroids; mindflow never reads them, so opt in to that now.
os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")

__version__ = "0.1.0"
