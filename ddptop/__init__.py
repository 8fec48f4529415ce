"""ddptop: how well does distributed PyTorch training scale on this node, and why not better?

The package root imports nothing: the TUI, the headless runner and the benchmark kernels (which import
``ddptop.protocol.wire``) all start from here and each pays only for what it uses.
"""

__version__ = "0.1.0"
