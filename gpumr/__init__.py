"""gpumr: image processing on Hadoop Streaming that uses a node's GPU whenever it is free."""

__version__ = "0.1.0"
